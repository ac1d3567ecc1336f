"""Benchmark: how long the main job takes, old code against new, in the same run of the machine.

Targets (see BENCHMARKS.md "The main job in under a minute"):

* ``roofprof run`` <= 60 s on the 2-core CPU machine (quiet, warm numba cache), <= 75 s on a
  fresh install;
* ``roofprof predict --estimator measured`` for a model not measured before (empty cache)
  <= 12 s;
* the measured estimator's residuals against the real run unchanged within run-to-run noise.

Each "side" is a roofprof executable (``--old`` and ``--new``: paths to ``roofprof`` in two
virtualenvs, e.g. one installed from the previous commit). Runs alternate old, new, old,
new, ... so a slow spell of the machine hits both sides; before each run the script waits
(up to ``--quiet-wait`` seconds) for the 1-minute load average to fall under 0.7, and it
records the load before and after each run. Every run gets a fresh measurement cache
(``ROOFPROF_CACHE``) unless ``--reuse-roofline`` says the new side may reuse its cached
roofline (then the first new run measures it and the others reuse it).

    python benchmarks/bench_run_speed.py --old /tmp/old/bin/roofprof --new .venv/bin/roofprof \\
        --repeats 3 --out benchmarks/results/run_speed_cpu_$(date +%F).json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_model import wait_quiet  # the same quiet-machine wait as the model benchmark


def residuals(comparison: list | None) -> tuple[float, float] | None:
    """The measured estimator's (TTFT, decode) residuals in % (predicted / real - 1) from a
    report's ``comparison`` rows; None when the run had no validation."""
    for row in comparison or []:
        if isinstance(row, dict) and row.get("estimator") == "measured" and "ttft_residual" in row:
            return 100 * row["ttft_residual"], 100 * row["decode_residual"]
    return None


def one_run(exe: str, extra: list[str], cache: str, label: str, quiet_wait: float) -> dict:
    load_before = wait_quiet(quiet_wait)
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "ROOFPROF_CACHE": cache}
        t0 = time.perf_counter()
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(
                [exe, "run", "--out", out, *extra], stdout=log, stderr=log, env=env
            )
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            log.seek(0)
            stderr = log.read().decode(errors="replace")
        rc = os.waitstatus_to_exitcode(status)
        rec = {
            "side": label,
            "wall_s": wall,
            "rc": rc,
            "max_rss_bytes": usage.ru_maxrss * 1024,
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
        }
        report = Path(out) / "report.json"
        if rc == 0 and report.exists():
            data = json.loads(report.read_text())
            rec["step_seconds"] = data.get("step_seconds")
            rec["comparison"] = data.get("comparison")
            rec["roofline_source"] = (data.get("settings") or {}).get("roofline_source")
        else:
            rec["stderr_tail"] = stderr[-2000:]
    print(json.dumps({k: v for k, v in rec.items() if k != "comparison"}), flush=True)
    return rec


def one_predict(exe: str, model: str, cache: str, quiet_wait: float) -> dict:
    load_before = wait_quiet(quiet_wait)
    env = {**os.environ, "ROOFPROF_CACHE": cache}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            exe,
            "predict",
            "--model",
            model,
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--prompt",
            "128",
            "--estimator",
            "measured",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    rec = {
        "wall_s": time.perf_counter() - t0,
        "rc": proc.returncode,
        "load_before": load_before,
        "model": model,
    }
    print(json.dumps(rec), flush=True)
    return rec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="roofprof executable of the reference code")
    parser.add_argument("--new", required=True, help="roofprof executable of the code under test")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quiet-wait", type=float, default=300.0)
    parser.add_argument(
        "--reuse-roofline",
        action="store_true",
        help="let the new side reuse its cached roofline after its first run",
    )
    parser.add_argument(
        "--predict-model",
        default="llama-3.2-3b",
        help="model for the empty-cache `predict --estimator measured` timing (fp32, "
        "128-token prompt; `run` profiles llama-3.2-1b, so this one is unseen)",
    )
    parser.add_argument(
        "--cold-first",
        nargs=2,
        metavar=("OLD_TREE", "NEW_TREE"),
        help="first run each side once with its numba cache cleared (a fresh install): "
        "the source trees whose kernels/__pycache__ holds the cache",
    )
    parser.add_argument("--out", default="bench-run-speed.json")
    args = parser.parse_args(argv)

    records: list[dict] = []
    if args.cold_first:
        for label, exe, tree in (
            ("old", args.old, args.cold_first[0]),
            ("new", args.new, args.cold_first[1]),
        ):
            for f in Path(tree, "kernels", "__pycache__").glob("*.nb[ic]"):
                f.unlink()
            rec = one_run(
                exe,
                ["--fresh-roofline"] * (label == "new"),
                tempfile.mkdtemp(prefix="rp-cold-"),
                label,
                args.quiet_wait,
            )
            rec["cold_numba_cache"] = True
            records.append(rec)
    shared_new_cache = tempfile.mkdtemp(prefix="rp-new-cache-")
    for i in range(args.repeats):
        for label, exe in (("old", args.old), ("new", args.new)):
            if label == "new" and args.reuse_roofline:
                cache, extra = shared_new_cache, []
            else:
                cache, extra = (
                    tempfile.mkdtemp(prefix=f"rp-{label}-{i}-"),
                    ["--fresh-roofline"] * (label == "new"),
                )
            records.append(one_run(exe, extra, cache, label, args.quiet_wait))
    predicts = []
    for label, exe in (("old", args.old), ("new", args.new)):
        for _ in range(2):
            rec = one_predict(
                exe, args.predict_model, tempfile.mkdtemp(prefix="rp-predict-"), args.quiet_wait
            )
            predicts.append({"side": label, **rec})
    result = {
        "benchmark": "run_speed",
        "machine": {
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "old": args.old,
        "new": args.new,
        "reuse_roofline": args.reuse_roofline,
        "runs": records,
        "predict_measured_empty_cache": predicts,
    }
    for side in ("old", "new"):
        walls = sorted(
            r["wall_s"]
            for r in records
            if r["side"] == side and r["rc"] == 0 and not r.get("cold_numba_cache")
        )
        result[f"{side}_wall_s"] = walls
        result[f"{side}_residuals_pct"] = [
            res
            for r in records
            if r["side"] == side
            if (res := residuals(r.get("comparison"))) is not None
        ]
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(
        json.dumps(
            {
                k: result[k]
                for k in ("old_wall_s", "new_wall_s", "old_residuals_pct", "new_residuals_pct")
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
