"""The trace examples run on a CPU (each well under a minute) and print real figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from roofprof.roofline import Ceiling, Roofline  # noqa: E402

pytestmark = pytest.mark.slow  # subprocesses, ranks or pinned installs: seconds each

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def roofline_file(tmp_path_factory) -> Path:
    r = Roofline(
        "test cpu",
        (
            Ceiling("fp32 peak", "compute", 1e11, dtype="fp32", source="measured"),
            Ceiling("DRAM", "memory", 1e10, level="dram", source="measured"),
        ),
    )
    p = tmp_path_factory.mktemp("rl") / "roofline.json"
    p.write_text(json.dumps(r.to_dict()))
    return p


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), "--device", "cpu", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_trace_a_model(tmp_path, roofline_file):
    out = _run("trace_a_model.py", "--out", str(tmp_path), "--roofline", str(roofline_file))
    assert "causal (top-left)" in out and "coverage 100.0%" in out and "MFU" in out
    assert (tmp_path / "report.html").exists() and (tmp_path / "roofline.png").exists()


def test_trace_custom_op(tmp_path, roofline_file):
    out = _run("trace_custom_op.py", "--out", str(tmp_path), "--roofline", str(roofline_file))
    assert "before: demo::scaled_silu flops=None" in out and "no-cost" in out
    assert "after:  demo::scaled_silu flops=524288 bytes=1048576" in out
