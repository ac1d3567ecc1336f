"""scripts/gpu_check.sh end to end with a stand-in interpreter (no GPU here).

``PYTHON`` is a small shell script: ``-m roofprof selftest`` writes a roofline file as the
real selftest does, ``-m roofprof run`` records its arguments, writes one per-step JSON file
and exits 124 as ``timeout`` does; everything else (the script's own summary code) runs
on the real Python. What is checked is the script's logic: the run gets the selftest's
roofline, the time box leaves the finished steps' results in $OUT, NVVM's CUDA_HOME.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

STAND_IN = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "roofprof" ]; then
    echo "$3 CUDA_HOME=${CUDA_HOME:-} $*" >>"$LOG_ARGS"
    case "$3" in
    doctor) echo '{"components": []}'; exit 0 ;;
    selftest) out="$5"; echo '{"ceilings": []}' >"$out/selftest_roofline.json"
              echo '{"complete": false, "sections": {}}' >"$out/selftest.json"; exit 0 ;;
    run) while [ $# -gt 0 ]; do [ "$1" = "--out" ] && dir="$2"; shift; done
         echo '{"phase": "prefill"}' >"$dir/profile-prefill.json"; exit 124 ;;
    esac
    exit 0
fi
exec "$REAL_PY" "$@"
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_run_uses_the_selftest_roofline_and_a_time_box_leaves_partial_results(tmp_path):
    py = tmp_path / "python"
    py.write_text(STAND_IN)
    py.chmod(0o755)
    out, log = tmp_path / "out", tmp_path / "args.log"
    env = {
        **os.environ,
        "PYTHON": str(py),
        "REAL_PY": sys.executable,
        "LOG_ARGS": str(log),
        "OUT": str(out),
        "SKIP_INSTALL": "1",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    calls = {line.split()[0]: line for line in log.read_text().splitlines()}
    run = calls["run"].split()
    assert run[run.index("--roofline") + 1] == str(out / "selftest_roofline.json")
    assert run[run.index("--impl") + 1] == "cupy,cublas,torch-eager"
    report = json.loads((out / "run_report.json").read_text())
    assert report["partial"] is True and report["rc"] == 124
    assert report["files"] == {"profile-prefill.json": {"phase": "prefill"}}
    summary = json.loads((out / "gpu_check.json").read_text())
    assert summary["steps"]["run"]["rc"] == 124 and summary["steps"]["selftest"]["rc"] == 0
    assert len(list(out.iterdir())) <= 8
    expected_home = "/usr/local/cuda" if Path("/usr/local/cuda/nvvm").is_dir() else ""
    assert calls["selftest"].split()[1] == f"CUDA_HOME={expected_home}"
