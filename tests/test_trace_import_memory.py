"""Importing a trace takes memory in proportion to the file: a real H100 trace tiled to two
sizes (its events repeated, shifted in time, their ids renumbered), each imported in a fresh
process; the peak resident memory grows by well under 2.5 bytes per byte of JSON (the
importer that parsed the whole file into dicts grew by about 5)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("resource")  # peak resident memory (not on Windows)
pytestmark = pytest.mark.slow  # two fresh processes importing 7 and 22 MB traces: ~20 s

H100 = Path(__file__).parent / "fixtures" / "traces" / "h100_torch2_tracelens_bert_small.json.gz"
IDS = ("External id", "correlation", "external id")

_CHILD = """
import resource, sys
import torch  # noqa: F401
from roofprof.tracing.chrome import import_trace
import roofprof.tracing.result, roofprof.tracing.tracer  # noqa: F401
import_trace(sys.argv[1], device="cpu", roofline="none")  # warm: lazy imports, op schemas
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
r = import_trace(sys.argv[2], device="cpu", roofline="none")
kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(kb // 1024 if sys.platform == "darwin" else kb, len(r.ops))  # macOS: bytes
"""


def tile(src: Path, dst: Path, n: int) -> int:
    """Write ``src``'s events ``n`` times into ``dst`` (JSON); returns its size in bytes."""
    with gzip.open(src, "rt") as f:
        data = json.load(f)
    xs = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    span = max(e["ts"] + e.get("dur", 0) for e in xs) - min(e["ts"] for e in xs) + 10
    step = 1 + max(v for e in xs for k in IDS if isinstance(v := (e.get("args") or {}).get(k), int))
    out = [e for e in data["traceEvents"] if e.get("ph") != "X"]
    for i in range(n):
        for e in xs:
            a = dict(e.get("args") or {})
            for k in IDS:
                if isinstance(a.get(k), int):
                    a[k] += i * step
            out.append({**e, "ts": e["ts"] + i * span, "args": a})
    data["traceEvents"] = out
    dst.write_text(json.dumps(data))
    return dst.stat().st_size


def _growth_kb(small: Path, path: Path) -> tuple[int, int]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(small), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    kb, ops = done.stdout.split()
    return int(kb), int(ops)


def test_import_memory_grows_in_proportion_to_the_file(tmp_path):
    warm = tmp_path / "warm.json"
    tile(H100, warm, 1)
    sizes, growth = [], []
    for n in (30, 90):
        p = tmp_path / f"t{n}.json"
        sizes.append(tile(H100, p, n))
        kb, ops = _growth_kb(warm, p)
        growth.append(kb * 1024)
        assert ops > 10
    slope = (growth[1] - growth[0]) / (sizes[1] - sizes[0])
    assert sizes[1] > 20e6
    assert slope < 2.5, f"{slope:.2f} bytes of memory per byte of trace ({growth}, {sizes})"
