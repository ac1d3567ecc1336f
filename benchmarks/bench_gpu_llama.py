"""Benchmark the GPU kernels at Llama shapes against cuBLAS, and the GPU roofline against its
datasheet.

Targets, every one a ratio measured in the same run (``roofprof.selftest`` holds
the arithmetic, :func:`roofprof.selftest.evaluate_targets`):

* HBM probe ≥ 90 % of the datasheet bandwidth and ≥ a device-to-device ``cudaMemcpy``;
* FP32 FMA probe ≥ 95 % of SMs × FP32 lanes × 2 × the SM clock seen;
* the attainable bf16 ceiling ≥ 95 % of the best cuBLAS bf16 GEMM;
* CuPy GEMV at Llama 3.1 8B decode shapes (batch 1) ≥ 85 % of the HBM probe and ≥ torch.matmul;
* Numba GEMV ≥ 70 % of the HBM probe; ``mma.sync`` GEMM at prefill shapes ≥ 50 % of cuBLAS;
  Numba tiled GEMM ≥ 50 % of the FP32 FMA ceiling.

It runs the ``roofline`` and ``benchmarks`` sections of ``roofprof selftest`` (checks before
timing included) and prints the per-pass table (time-weighted over each pass's GEMMs, each
implementation against cuBLAS on the same shapes).

Usage (needs an NVIDIA GPU; exits 2 with the reason otherwise)::

    python benchmarks/bench_gpu_llama.py [--out bench-gpu] [--quick] [--budget 300]

**Not measured yet**: no GPU was available when this was written; every figure comes from
the first run on one (see docs/gpu.md).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", default="bench-gpu", help="output folder (selftest.json, selftest.md, ...)"
    )
    parser.add_argument("--quick", action="store_true", help="quick roofline plan, 8B shapes only")
    parser.add_argument("--budget", type=float, default=300.0, help="time budget in seconds")
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args(argv)

    from roofprof.errors import RoofprofError
    from roofprof.selftest import run_selftest

    try:
        res = run_selftest(
            args.out,
            quick=args.quick,
            budget_s=args.budget,
            device=args.device,
            sections=("roofline", "benchmarks"),
            progress=lambda m: print(m, file=sys.stderr),
        )
    except RoofprofError as exc:
        print(f"bench_gpu_llama: {exc}", file=sys.stderr)
        return 2
    print(
        f"{'model':<14} {'phase':<8} {'batch':>5} {'dtype':<5} {'impl':<8} "
        f"{'GB/s':>8} {'TFLOP/s':>8} {'vs cuBLAS':>9}"
    )
    for r in (res.get("benchmarks") or {}).get("summary", []):
        vs = f"{r['vs_cublas']:.2f}" if r.get("vs_cublas") else "-"
        print(
            f"{r['model']:<14} {r['phase']:<8} {r['batch']:>5} {r['dtype']:<5} {r['impl']:<8} "
            f"{r['bytes_per_s'] / 1e9:>8.0f} {r['flops_per_s'] / 1e12:>8.1f} {vs:>9}"
        )
    print()
    for t in res.get("targets", []):
        if t["id"] in ("counters", "pytest_gpu", "correctness"):
            continue
        value = "-" if t["value"] is None else f"{t['value']:.3f}"
        print(f"{t['status']:>12}  {value:>7}  {t['description']}")
    return (
        1
        if any(
            t.get("passed") is False
            for t in res.get("targets", [])
            if t["id"] not in ("counters", "pytest_gpu", "correctness")
        )
        else 0
    )


if __name__ == "__main__":
    sys.exit(main())
