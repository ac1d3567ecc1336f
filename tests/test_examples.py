"""The examples in examples/ run on a CPU, write what they say, and print real figures."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _run(script: str, *args: str, timeout: float = 300) -> str:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--device", "cpu", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def _strict(value):
    raise ValueError(f"non-finite JSON constant {value}")


@pytest.fixture(scope="module")
def roofline_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("examples")
    stdout = _run("machine_roofline.py", "--out", str(out))
    assert "tokens/s" in stdout and "DRAM read" in stdout
    return out


@pytest.mark.slow
def test_machine_roofline_writes_a_strict_roofline_and_plots(roofline_dir: Path) -> None:
    payload = json.loads((roofline_dir / "roofline.json").read_text(), parse_constant=_strict)
    ceilings = payload["roofline"]["ceilings"]
    assert {c["level"] for c in ceilings if c["kind"] == "memory"} >= {"dram"}
    assert all(c["value"] > 0 and math.isfinite(c["value"]) for c in ceilings)
    for png in ("roofline.png", "staircase.png", "intensity.png"):
        assert (roofline_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_profile_this_machine_places_every_llama_op(roofline_dir: Path, tmp_path: Path) -> None:
    stdout = _run(
        "profile_this_machine.py",
        "--out",
        str(tmp_path),
        "--roofline",
        str(roofline_dir / "roofline.json"),
    )
    for op in ("q_proj", "attention", "down_proj", "lm_head"):
        line = next(ln for ln in stdout.splitlines() if ln.startswith(op + " "))
        assert "memory" in line or "compute" in line, line  # placed: a bound was decided
    assert (tmp_path / "roofline.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_validate_datasheet_prints_residuals_against_a_real_run(
    roofline_dir: Path, tmp_path: Path
) -> None:
    stdout = _run(
        "validate_datasheet.py",
        "--out",
        str(tmp_path),
        "--roofline",
        str(roofline_dir / "roofline.json"),
    )
    residuals = {
        ln.split()[0]: [t for t in ln.split() if t.endswith("%")]
        for ln in stdout.splitlines()
        if ln.split() and ln.split()[0] in ("empirical", "measured", "real")
    }
    assert set(residuals) == {"empirical", "measured", "real"}
    assert residuals["real"] == ["+0.0%", "+0.0%"]  # the real run is the reference
    for label in ("empirical", "measured"):  # TTFT and decode residuals, finite
        assert len(residuals[label]) == 2 and all("nan" not in r for r in residuals[label])


@pytest.mark.slow
def test_measure_my_function_checks_then_places(roofline_dir: Path, tmp_path: Path) -> None:
    stdout = _run(
        "measure_my_function.py",
        "--out",
        str(tmp_path),
        "--roofline",
        str(roofline_dir / "roofline.json"),
    )
    rows = [
        ln
        for ln in stdout.splitlines()
        if ln.startswith(("np.matmul", "np.einsum", "blocked rows"))
    ]
    assert len(rows) == 3 and all(ln.endswith("memory") for ln in rows)  # a GEMV is memory-bound
    assert "wrong result" not in stdout
