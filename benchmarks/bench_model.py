"""Benchmark: `roofprof run` end to end, and each estimator's residual against the real model.

Targets (see BENCHMARKS.md):

* CPU, Llama 3.2 1B fp32, batch 1: ``measured`` within ±15 % of the real decode step and
  ±20 % of the real 128-token prefill; ``roofprof run`` within 5 minutes on 2 cores.
* GPU, Llama 3.1 8B bf16: decode within ±10 %, TTFT within ±15 %, all residuals reported.

Every figure is measured in the same run as what it is compared with. The machine's load
average is recorded before and after (other processes on the cores make CPU timings noisy);
``--wait-quiet`` waits (up to 15 minutes) for the 1-minute load to drop below 0.7 first.

    python benchmarks/bench_model.py --out /tmp/bench-model.json            # CPU, defaults
    python benchmarks/bench_model.py --device cuda:0 --model llama-3.1-8b   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path


def lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return platform.processor() or "unknown"


def wait_quiet(limit_s: float = 900.0, threshold: float = 0.7) -> float:
    t0 = time.time()
    while time.time() - t0 < limit_s:
        load = os.getloadavg()[0]
        if load < threshold:
            return load
        time.sleep(10)
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default="bench-model.json")
    parser.add_argument("--report", default="/tmp/roofprof-bench-report")
    parser.add_argument(
        "--repeats", type=int, default=1, help="whole runs (each with its own real run)"
    )
    parser.add_argument("--wait-quiet", action="store_true")
    args = parser.parse_args(argv)

    from roofprof import run

    runs = []
    for i in range(args.repeats):
        load_wait = wait_quiet() if args.wait_quiet else None
        load_start = os.getloadavg()
        t0 = time.perf_counter()
        result = run(args.model, device=args.device, out=f"{args.report}-{i}")
        wall = time.perf_counter() - t0
        rows = result.validation.comparison() if result.validation is not None else []
        runs.append(
            {
                "wall_s": wall,
                "step_seconds": result.step_seconds,
                "load_average_start": load_start,
                "load_average_end": os.getloadavg(),
                "load_after_wait": load_wait,
                "model": result.model,
                "dtype": result.dtype,
                "device": result.device.get("name"),
                "real": result.validation.real.to_dict() if result.validation else None,
                "backend": result.validation.backend if result.validation else None,
                "comparison": rows,
                "report": str(result.out / "index.html"),
            }
        )
        print(f"run {i + 1}: {wall:.0f} s; load {load_start[0]:.2f} → {os.getloadavg()[0]:.2f}")
        for r in rows:
            print(
                f"  {r['estimator']:20s} TTFT {r['ttft_s']:.3f} s ({r['ttft_residual']:+.1%})  "
                f"decode {r['decode_step_s'] * 1e3:.1f} ms ({r['decode_residual']:+.1%})"
            )
    payload = {
        "benchmark": "roofprof run + validation residuals",
        "machine": lscpu_model(),
        "cores": os.cpu_count(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "runs": runs,
    }
    Path(args.out).write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
