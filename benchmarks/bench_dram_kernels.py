"""roofprof's CPU DRAM kernels before and after against BabelStream's loops, in one process.

The roofline benchmark against BabelStream (``bench_babelstream.py``) compares whole runs a
minute apart; on a shared host that minute moves bandwidth more than the kernels differ.
This one times single calls, alternating in random order within each round, all on the same
two libgomp threads (numba's ``omp`` layer and the C code share its pool):

* BabelStream's OpenMP loops (``src/omp/OMPStream.cpp``: Dot, Triad, Copy over three arrays
  of 2^25 doubles), compiled here with ``gcc -O3 -march=native -fopenmp``; Dot also with
  ``-ffast-math`` (the stock build adds Dot's products one after another into one register,
  which caps it below DRAM speed on a small machine);
* roofprof's read, copy and triad probes at a 256 MiB working set (its first DRAM size) as
  they run now (two halves per thread, calls of ``PASSES`` passes, 20 ms or more), and,
  with ``--before``, another checkout's kernels as its roofline ran them (one pass per
  call), on the same buffers.

Ratios: roofprof ÷ the BabelStream loop of the same traffic (read ÷ the vectorised Dot), as
ratio of the best calls, of the 90th percentiles, and the median of the per-round ratios.

Usage::

    python benchmarks/bench_dram_kernels.py [--rounds 200] [--out dram_kernels.json] \
        [--before <other checkout>/kernels/cpu.py]
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import random
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from roofprof._resources import kernels_module
from roofprof.devices.cpu import CpuDevice
from roofprof.devices.cpu_probes import (
    ProbeArena,
    aligned_empty,
    setup_copy,
    setup_read,
    setup_triad,
)

C_SOURCE = r"""
#include <stdint.h>
double c_dot(const double *a, const double *b, intptr_t n) {
  double sum = 0.0;
  #pragma omp parallel for reduction(+:sum)
  for (intptr_t i = 0; i < n; i++) sum += a[i] * b[i];
  return sum;
}
void c_triad(double *restrict a, const double *restrict b, const double *restrict c,
             double s, intptr_t n) {
  #pragma omp parallel for
  for (intptr_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}
void c_copy(const double *restrict a, double *restrict c, intptr_t n) {
  #pragma omp parallel for
  for (intptr_t i = 0; i < n; i++) c[i] = a[i];
}
"""
#: Passes per call of the probes as they run now at 256 MiB (``dram_call_s`` = 20 ms at
#: 5-6 ms a pass on a quiet 2-core guest).
PASSES = 4
MiB = 1 << 20


def load_kernels(path: Path, cache_dir: Path) -> Any:
    """The kernels module at ``path`` (another checkout's ``kernels/cpu.py``), imported under
    its own name so that it sits beside this checkout's; numba caches its compiled kernels
    in ``cache_dir`` (not beside the file, where that checkout's own runs cache theirs)."""
    from numba.core import config

    spec = importlib.util.spec_from_file_location("kernels_cpu_before", path)
    if spec is None or spec.loader is None:
        sys.exit(f"bench_dram_kernels: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # numba's cache re-imports a kernel's module by name
    saved = getattr(config, "CACHE_DIR", "")
    config.CACHE_DIR = str(cache_dir)  # pyright: ignore[reportAttributeAccessIssue]
    try:
        spec.loader.exec_module(module)
    finally:
        config.CACHE_DIR = saved  # pyright: ignore[reportAttributeAccessIssue]
    return module


def build(workdir: Path) -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """BabelStream's loops as two shared libraries: stock flags, and with ``-ffast-math``."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        sys.exit("bench_dram_kernels: no C compiler (gcc) on PATH")
    src = workdir / "babel_loops.c"
    src.write_text(C_SOURCE)
    libs = []
    for name, extra in (("stock", []), ("fastmath", ["-ffast-math"])):
        out = workdir / f"libbabel_{name}.so"
        flags = ["-O3", "-march=native", "-fopenmp", *extra, "-shared", "-fPIC"]
        subprocess.run([cc, *flags, str(src), "-o", str(out)], check=True)
        lib = ctypes.CDLL(str(out))
        p, n, d = ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_double
        lib.c_dot.argtypes, lib.c_dot.restype = [p, p, n], d
        lib.c_triad.argtypes = [p, p, p, d, n]
        lib.c_copy.argtypes = [p, p, n]
        libs.append(lib)
    return libs[0], libs[1]


def _views(arena: ProbeArena, count: int, n: int) -> list[np.ndarray]:
    """The staggered arrays the copy/triad probes use in the arena (cpu_probes' layout)."""
    stride = -(-n // 512) * 512 + 1088 // 8
    assert arena.buf is not None
    return [arena.buf[i * stride : i * stride + n] for i in range(count)]


def _q(v: list[float], p: float) -> float:
    return sorted(v)[int(p * (len(v) - 1))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--out", default="dram_kernels.json")
    ap.add_argument(
        "--before",
        type=Path,
        help="another checkout's kernels/cpu.py: its read, copy and triad kernels are timed "
        "as 'before' (one pass a call, and read also at PASSES)",
    )
    args = ap.parse_args(argv)
    k = kernels_module("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        old = load_kernels(args.before, Path(tmp) / "numba") if args.before else None
        stock, fast = build(Path(tmp))
        dev, arena = CpuDevice(), ProbeArena()
        nt = dev.nthreads
        setup_read(dev, arena, working_set_bytes=512 * MiB)  # the arena at its largest
        rd = setup_read(dev, arena, working_set_bytes=256 * MiB)
        tr = setup_triad(dev, arena, working_set_bytes=256 * MiB)
        cp = setup_copy(dev, arena, working_set_bytes=256 * MiB)
        assert arena.buf is not None
        x = arena.buf[: rd.params["elements"]]
        ta, tb, tc = _views(arena, 3, tr.params["elements_per_array"])
        ca, cc = _views(arena, 2, cp.params["elements_per_array"])
        n = 1 << 25  # BabelStream's default arrays
        a, b, c = (aligned_empty(n, np.float64) for _ in range(3))
        for z in (a, b, c):
            k.fill_distinct(z)
        pa, pb, pc = (z.ctypes.data for z in (a, b, c))
        out = np.zeros(nt)
        calls = {
            "BabelStream Dot": (lambda: stock.c_dot(pa, pb, n), 16 * n),
            "BabelStream Dot, -ffast-math": (lambda: fast.c_dot(pa, pb, n), 16 * n),
            "BabelStream Triad": (lambda: stock.c_triad(pa, pb, pc, 0.4, n), 24 * n),
            "BabelStream Copy": (lambda: stock.c_copy(pa, pc, n), 16 * n),
            "read now, 1 pass a call": (lambda: rd.run(1), rd.bytes_per_rep),
            "read now": (lambda: rd.run(PASSES), PASSES * rd.bytes_per_rep),
            "triad now": (lambda: tr.run(PASSES), PASSES * tr.bytes_per_rep),
            "copy now": (lambda: cp.run(PASSES), PASSES * cp.bytes_per_rep),
        }
        if old is not None:
            calls |= {
                "read before": (lambda: old.read_sum(x, out, nt, 1), rd.bytes_per_rep),
                f"read before, {PASSES} passes a call": (
                    lambda: old.read_sum(x, out, nt, PASSES),
                    PASSES * rd.bytes_per_rep,
                ),
                "triad before": (lambda: old.triad(ta, tb, tc, 0.5, nt, 1), tr.bytes_per_rep),
                "copy before": (lambda: old.copy(ca, cc, nt, 1), cp.bytes_per_rep),
            }
        refs = {
            "read": "BabelStream Dot, -ffast-math",
            "triad": "BabelStream Triad",
            "copy": "BabelStream Copy",
            "BabelStream Dot": "BabelStream Dot, -ffast-math",
        }
        for fn, _ in calls.values():
            fn()  # compiled and warm
        samples: dict[str, list[float]] = {name: [] for name in calls}
        t_start = time.time()
        for _ in range(args.rounds):
            order = list(calls)
            random.shuffle(order)
            for name in order:
                fn, nbytes = calls[name]
                t0 = time.perf_counter()
                fn()
                samples[name].append(nbytes / (time.perf_counter() - t0))
    summary = {}
    for name, v in samples.items():
        ref_name = next((r for key, r in refs.items() if name.startswith(key)), None)
        ref = samples[ref_name] if ref_name else v
        summary[name] = {
            "best_bytes_per_s": max(v),
            "p90_bytes_per_s": _q(v, 0.9),
            "median_bytes_per_s": st.median(v),
            "against": ref_name,
            "best_ratio": max(v) / max(ref),
            "p90_ratio": _q(v, 0.9) / _q(ref, 0.9),
            "paired_median_ratio": st.median(s / r for s, r in zip(v, ref, strict=True)),
        }
        row = summary[name]
        print(
            f"{name:30s} best {max(v) / 1e9:5.1f}  p90 {_q(v, 0.9) / 1e9:5.1f}  median "
            f"{st.median(v) / 1e9:5.1f} GB/s | / {ref_name or '-'}: best "
            f"{row['best_ratio']:.3f}  p90 {row['p90_ratio']:.3f}  paired median "
            f"{row['paired_median_ratio']:.3f}"
        )
    payload = {
        "benchmark": "CPU DRAM kernels before/now vs BabelStream loops, one process, alternating",
        "before": str(args.before) if args.before else None,
        "rounds": args.rounds,
        "threads": nt,
        "started_unix": t_start,
        "seconds": time.time() - t_start,
        "summary": summary,
        "samples_bytes_per_s": samples,
    }
    Path(args.out).write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
