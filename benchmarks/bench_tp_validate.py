"""Benchmark tensor-parallel validation on a CPU: ranks profiled together against alone.

``roofprof validate --tp 2 --device cpu`` runs a real two-rank plain-torch Llama over gloo
and predicts it with the ``measured`` estimator plus measured collectives. The per-rank ops
are profiled either on both ranks at once (``--rank-profile together``, the default: each op
timed while the other rank runs the same list, sharing the cores' memory system as in the
real run) or in one process alone (``--rank-profile alone``). Each round runs both in fresh
processes, alternating which goes first, after waiting for an idle machine; the figures are
the residuals (predicted ÷ real − 1) of TTFT and of the decode step, per round and their
median.

Target: both residuals within the single-rank targets (TTFT ±15 %, decode ±10 %) with the
ranks profiled together, medians of the rounds.

Usage::

    python benchmarks/bench_tp_validate.py [--rounds 3] [--out tp_validate_cpu.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_cpu_roofline import QUIET_LOG, lscpu, wait_quiet  # noqa: E402

#: The command's settings (a Llama 3.2 1B cut to 2 layers: its 128,256-token vocabulary
#: keeps the decode step memory-bound on one rank's half of the LM head).
ARGS = (
    "--tp 2 --device cpu -m llama-3.2-1b --max-layers 2 --prompt 32 --steps 4 --repeats 2 "
    "--budget 0.05"
).split()
TARGET = {"ttft": 0.15, "decode": 0.10}


def run_once(profile: str, out: Path) -> dict:
    """One ``roofprof validate --tp 2`` in a fresh process: its residuals and real times."""
    cmd = [sys.executable, "-m", "roofprof", "validate", *ARGS, "--rank-profile", profile]
    subprocess.run([*cmd, "-o", str(out), "-f", "json"], check=True, capture_output=True)
    d = json.loads(out.read_text())
    measured = next(r for r in d["comparison"] if r["estimator"] == "measured")
    return {
        "ttft_residual": measured["ttft_residual"],
        "decode_residual": measured["decode_residual"],
        "real_ttft_s": d["real"]["prefill_s"],
        "real_decode_s": d["real"]["decode_s"],
        "predicted_ttft_s": measured["ttft_s"],
        "predicted_decode_s": measured["decode_step_s"],
        "notes": d["notes"],
        "load_average_start_end": d.get("load_average_start_end"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="tp_validate_cpu.json")
    ap.add_argument("--max-wait", type=float, default=60.0, help="seconds to wait for quiet")
    args = ap.parse_args(argv)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = ("together", "alone") if i % 2 == 0 else ("alone", "together")
            row = {}
            for profile in order:
                wait_quiet(f"{profile} {i + 1}", args.max_wait)
                row[profile] = run_once(profile, Path(tmp) / f"{profile}{i}.json")
            rounds.append(row)
            print(
                f"round {i + 1}: "
                + "; ".join(
                    f"{p}: TTFT {row[p]['ttft_residual']:+.1%}, decode "
                    f"{row[p]['decode_residual']:+.1%} (real {row[p]['real_ttft_s'] * 1e3:.0f} / "
                    f"{row[p]['real_decode_s'] * 1e3:.0f} ms)"
                    for p in ("together", "alone")
                ),
                flush=True,
            )
    summary = {
        p: {k: statistics.median(r[p][f"{k}_residual"] for r in rounds) for k in ("ttft", "decode")}
        for p in ("together", "alone")
    }
    met = all(abs(summary["together"][k]) <= TARGET[k] for k in TARGET)
    payload = {
        "benchmark": "roofprof validate --tp 2 on a CPU: ranks profiled together vs alone",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {**lscpu(), "python": platform.python_version()},
        "command": "roofprof validate " + " ".join(ARGS) + " --rank-profile together|alone",
        "target": TARGET,
        "rounds": rounds,
        "median_residuals": summary,
        "target_met_together": met,
        "quiet_log": QUIET_LOG,
    }
    Path(args.out).write_text(json.dumps(payload, indent=1))
    for p, s in summary.items():
        print(f"{p}: median TTFT residual {s['ttft']:+.1%}, decode {s['decode']:+.1%}")
    print("target (together: TTFT ±15 %, decode ±10 %):", "met" if met else "not met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
