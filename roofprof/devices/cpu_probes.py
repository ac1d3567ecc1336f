"""The CPU roofline probes: module-level ``setup_*`` functions and the catalogue that binds them.

Each ``setup_*(device, [arena,] ...)`` builds one :class:`~roofprof.devices.base.ProbeRun`
(its run, its FLOP/byte accounting and its correctness check) and can be tested on its
own; :func:`cpu_probes` binds them to a device with shared buffers
(:class:`ProbeArena`) and one random stream. The kernels are ``kernels/cpu.py`` (numba).

>>> from roofprof.devices.cpu import CpuDevice
>>> [p.name for p in cpu_probes(CpuDevice())][:3]
['read', 'copy', 'triad']
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof._resources import kernels_module
from roofprof.devices.base import (
    CheckResult,
    Probe,
    ProbeRun,
    compare,
    dram_resident,
    tolerance,
)
from roofprof.devices.pagemap import physical_locality
from roofprof.roofline.plausibility import Reference

if TYPE_CHECKING:
    from roofprof.devices.cpu import CpuDevice

__all__ = [
    "DRAM_CALL_S",
    "NP_DTYPES",
    "PROBE_SEED",
    "TRIAD_DRAM_OFFSET_BYTES",
    "ProbeArena",
    "aligned_empty",
    "cpu_probes",
    "dot_reference",
    "gemm_tolerance",
    "reference_passes",
    "setup_copy",
    "setup_fma",
    "setup_gemm",
    "setup_intensity",
    "setup_read",
    "setup_triad",
]

NP_DTYPES = {"fp32": np.float32, "fp64": np.float64}
#: Shortest timed call (s) of a DRAM bandwidth probe and of the reference Dot: as long as
#: BabelStream's calls at its default size, so a call's fixed cost weighs as little.
DRAM_CALL_S = 0.02
#: Seed of the random stream the probe checks draw from.
PROBE_SEED = 20240601
_ALIGN = 64
# Stagger between the arrays of a multi-array kernel, so that a[i], b[i], c[i] never sit
# at the same offset modulo 4 KiB (4K aliasing stalls loads behind unrelated stores).
_STAGGER_BYTES = 1088
#: Where the triad's arrays start past a cache-line boundary (bytes) once its working set is
#: DRAM-resident. Measured on a 2-core Zen 4 KVM guest, call by call in one process on the
#: same arena: arrays 16 (or 48) B past a line streamed 9-10 % more at the 90th percentile
#: than line-aligned or 32 B-offset ones, while copy moved under 1 % and read 2-4 %; in L1 the
#: same offset costs 29 %, in L3 5 %, so cache-resident sizes stay line-aligned.
TRIAD_DRAM_OFFSET_BYTES = 16


def aligned_empty(n: int, dtype: Any) -> np.ndarray:
    """An uninitialised 1-D array of ``n`` elements starting on a 64-byte boundary."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + _ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % _ALIGN
    return raw[start : start + n * itemsize].view(dtype)


class ProbeArena:
    """A growable, 64-byte aligned float64 buffer shared by the sizes of one sweep.

    ``locality``: the share of its pages whose successor lies in the same 2 MiB physical
    block after the first touch (:func:`~roofprof.devices.pagemap.physical_locality`;
    ``None`` where the kernel hides frame numbers), recorded in each bandwidth point's
    ``params``.
    """

    def __init__(self) -> None:
        self.buf: np.ndarray | None = None
        self.locality: float | None = None

    def get(self, n: int) -> np.ndarray:
        k = _kernels()
        if self.buf is None or self.buf.size < n:
            self.buf = None  # free the old one first
            # 1/64 headroom: the triad's three staggered arrays then fit in the buffer the read
            # sweep left at the same working set (one first touch of the largest size, not two)
            self.buf = aligned_empty(n + n // 64, np.float64)
            k.fill_distinct(self.buf)  # parallel first touch, every page distinct
            self.locality = physical_locality(self.buf.ctypes.data, self.buf.nbytes)
        return self.buf

    def params(self, **fields: Any) -> dict[str, Any]:
        """A bandwidth point's ``params``: ``fields`` plus the arena's ``physical_locality``."""
        return {**fields, "physical_locality": self.locality}


def _stagger_elems(itemsize: int) -> int:
    return _STAGGER_BYTES // itemsize


def _staggered(
    arena: ProbeArena, n: int, count: int, offset_bytes: int = 0
) -> tuple[np.ndarray, list[np.ndarray]]:
    """``count`` float64 arrays of ``n`` elements in the arena, each start staggered against
    4K aliasing and ``offset_bytes`` (a multiple of 8) past the arena's 64-byte aligned
    start, and the span of the arena they cover."""
    stride = -(-n // 512) * 512 + _stagger_elems(8)
    off = offset_bytes // 8
    buf = arena.get(count * stride + off)[: count * stride + off]
    return buf, [buf[off + i * stride : off + i * stride + n] for i in range(count)]


def _kernels() -> Any:
    return kernels_module("cpu")


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    return rng if rng is not None else np.random.default_rng(PROBE_SEED)


def setup_read(
    device: CpuDevice,
    arena: ProbeArena,
    *,
    working_set_bytes: int,
    rng: np.random.Generator | None = None,
) -> ProbeRun:
    """The ``read`` bandwidth probe at one working set (bytes): a parallel float64 sum.

    >>> from roofprof.devices.cpu import CpuDevice
    >>> run = setup_read(CpuDevice(), ProbeArena(), working_set_bytes=1 << 16)
    >>> run.bytes_per_rep == 8 * run.params["elements"] and run.check().ok
    True
    """
    k, rng = _kernels(), _rng(rng)
    nt = device.nthreads
    n = max(8 * nt, int(working_set_bytes) // 8 // 8 * 8)
    x = arena.get(n)[:n]
    out = np.zeros(max(nt, 1))

    def run(reps: int) -> float:
        return k.read_sum(x, out, nt, reps)

    def check() -> CheckResult:
        m = min(n, 1 << 16)
        x[:m] = rng.random(m) + 0.5
        got = k.read_sum(x, out, nt, 2)
        ref = k.read_sum_reference(x, 2)
        return compare(
            np.array([got]),
            np.array([ref]),
            1e-9,
            "read_sum vs numpy sum (random head, rest filled), 2 passes",
        )

    return ProbeRun(
        run=run,
        flops_per_rep=float(n),
        bytes_per_rep=8.0 * n,
        check=check,
        working_set_bytes=8 * n,
        params=arena.params(elements=n, threads=nt),
    )


def setup_triad(
    device: CpuDevice,
    arena: ProbeArena,
    *,
    working_set_bytes: int,
    rng: np.random.Generator | None = None,
) -> ProbeRun:
    """The ``triad`` bandwidth probe (STREAM ``a = b + s·c``) at one working set (bytes).

    DRAM-resident working sets (``DRAM_FACTOR`` × LLC and up) place the arrays
    :data:`TRIAD_DRAM_OFFSET_BYTES` past a cache line, recorded in ``params``
    (``array_offset_bytes``).

    >>> from roofprof.devices.cpu import CpuDevice
    >>> run = setup_triad(CpuDevice(), ProbeArena(), working_set_bytes=1 << 16)
    >>> run.params["array_offset_bytes"], run.check().ok
    (0, True)
    """
    k, rng = _kernels(), _rng(rng)
    nt = device.nthreads
    n = max(8 * nt, int(working_set_bytes) // 24 // 8 * 8)
    on_dram = dram_resident(24 * n, device.info.last_level_cache_bytes)
    offset = TRIAD_DRAM_OFFSET_BYTES if on_dram else 0
    buf, (a, b, c) = _staggered(arena, n, 3, offset)
    s = 0.5

    def run(reps: int) -> None:
        k.triad(a, b, c, s, nt, reps)

    def check() -> CheckResult:
        b[:] = rng.random(n) + 0.5
        c[:] = rng.random(n) + 0.5
        a[:] = np.nan
        k.triad(a, b, c, s, nt, 3)
        res = compare(
            a,
            k.triad_reference(b, c, s, 3),
            1e-15 * 8,
            "triad vs numpy b + s*c, a poisoned with NaN, 3 passes",
        )
        k.fill_distinct(buf)  # what the check wrote (the arena may be larger)
        return res

    return ProbeRun(
        run=run,
        flops_per_rep=2.0 * n,
        bytes_per_rep=24.0 * n,
        check=check,
        working_set_bytes=24 * n,
        params=arena.params(elements_per_array=n, threads=nt, array_offset_bytes=offset),
    )


def setup_copy(
    device: CpuDevice,
    arena: ProbeArena,
    *,
    working_set_bytes: int,
    rng: np.random.Generator | None = None,
) -> ProbeRun:
    """The ``copy`` bandwidth probe (STREAM ``c = a``) at one working set (bytes)."""
    k, rng = _kernels(), _rng(rng)
    nt = device.nthreads
    n = max(8 * nt, int(working_set_bytes) // 16 // 8 * 8)
    buf, (a, c) = _staggered(arena, n, 2)

    def run(reps: int) -> None:
        k.copy(a, c, nt, reps)

    def check() -> CheckResult:
        a[:] = rng.random(n) + 0.5
        c[:] = np.nan
        k.copy(a, c, nt, 3)
        res = compare(c, a + 2.0, 0.0, "copy vs a + 2 (the last pass), c poisoned with NaN")
        k.fill_distinct(buf)  # what the check wrote (the arena may be larger)
        return res

    return ProbeRun(
        run=run,
        flops_per_rep=0.0,
        bytes_per_rep=16.0 * n,
        check=check,
        working_set_bytes=16 * n,
        params=arena.params(elements_per_array=n, threads=nt),
    )


def setup_fma(device: CpuDevice, dtype: str, *, rng: np.random.Generator | None = None) -> ProbeRun:
    """The ``fma-<dtype>`` compute probe: 16 dependent FMAs per L1-resident element per rep."""
    k, rng = _kernels(), _rng(rng)
    np_t = NP_DTYPES[dtype]
    a, c = np_t(1.0 - 2.0**-10), np_t(2.0**-12)
    nt = device.nthreads
    n = nt * 4 * k.FMA_BLOCK  # four L1-resident blocks per thread
    x = aligned_empty(n, np_t)
    x[:] = rng.random(n).astype(np_t)

    def run(reps: int) -> None:
        k.fma_chain(x, a, c, 16, reps, k.FMA_BLOCK)

    def check() -> CheckResult:
        x0 = (rng.random(n) + 0.5).astype(np_t)
        x[:] = x0
        k.fma_chain(x, a, c, 16, 4, k.FMA_BLOCK)
        tol = 4 * 64 * float(np.finfo(np_t).eps)
        return compare(
            x,
            k.fma_chain_reference(x0, a, c, 64),
            tol,
            "64 chained FMAs per element vs closed form in float64",
        )

    return ProbeRun(
        run=run,
        flops_per_rep=2.0 * 16 * n,
        bytes_per_rep=2.0 * np.dtype(np_t).itemsize * n,
        check=check,
        working_set_bytes=n * np.dtype(np_t).itemsize,
        params={"elements": n, "block": k.FMA_BLOCK, "fmas_per_element_per_rep": 16},
    )


def setup_gemm(
    device: CpuDevice, dtype: str, *, size: int, rng: np.random.Generator | None = None
) -> ProbeRun:
    """The ``gemm-<dtype>`` probe: one ``size``-order numpy (BLAS) matmul per rep."""
    rng = _rng(rng)
    np_t = NP_DTYPES[dtype]
    n = int(size)
    a = rng.standard_normal((n, n)).astype(np_t)
    b = rng.standard_normal((n, n)).astype(np_t)
    out = np.empty((n, n), dtype=np_t)

    def run(reps: int) -> None:
        for _ in range(reps):
            np.matmul(a, b, out=out)

    def check() -> CheckResult:
        a[:] = rng.standard_normal((n, n))
        b[:] = rng.standard_normal((n, n))
        out[:] = np.nan
        np.matmul(a, b, out=out)
        rows = rng.choice(n, size=min(n, 32), replace=False)
        ref = a[rows].astype(np.float64) @ b.astype(np.float64)
        return compare(
            out[rows], ref, gemm_tolerance(dtype, n), "numpy matmul vs float64 reference on 32 rows"
        )

    item = np.dtype(np_t).itemsize
    return ProbeRun(
        run=run,
        flops_per_rep=2.0 * n**3,
        bytes_per_rep=3.0 * n * n * item,
        check=check,
        working_set_bytes=3 * n * n * item,
        params={"n": n},
    )


def setup_intensity(
    device: CpuDevice,
    arena: ProbeArena,
    dtype: str,
    *,
    working_set_bytes: int,
    fmas_per_element: int,
    rng: np.random.Generator | None = None,
) -> ProbeRun:
    """The ``intensity-<dtype>`` probe: ``fmas_per_element`` FMAs per element read and written."""
    k, rng = _kernels(), _rng(rng)
    np_t = NP_DTYPES[dtype]
    item = np.dtype(np_t).itemsize
    a, c = np_t(1.0 - 2.0**-10), np_t(2.0**-12)
    u, inner = k.fma_split(int(fmas_per_element))
    nt = device.nthreads
    quantum = k.FMA_BLOCK * nt
    n = max(quantum, int(working_set_bytes) // item // quantum * quantum)
    x = arena.get(-(-n * item // 8))[: n * item // 8].view(np_t)
    kk = u * inner

    def run(reps: int) -> None:
        for _ in range(reps):
            k.fma_chain(x, a, c, u, inner, k.FMA_BLOCK)

    def check() -> CheckResult:
        m = 2 * quantum
        y0 = (rng.random(m) + 0.5).astype(np_t)
        y = aligned_empty(m, np_t)
        y[:] = y0
        k.fma_chain(y, a, c, u, inner, k.FMA_BLOCK)
        tol = 4 * max(kk, 4) * float(np.finfo(np_t).eps)
        return compare(
            y,
            k.fma_chain_reference(y0, a, c, kk),
            tol,
            f"{kk} chained FMAs per element vs closed form in float64",
        )

    return ProbeRun(
        run=run,
        flops_per_rep=2.0 * kk * n,
        bytes_per_rep=2.0 * item * n,
        check=check,
        working_set_bytes=n * item,
        params={"elements": n, "fmas_per_element": kk, "unroll": u, "inner_passes": inner},
    )


def cpu_probes(device: CpuDevice) -> tuple[Probe, ...]:
    """The CPU probe catalogue (see the module docstring): the ``setup_*`` functions bound to
    this device, their buffers and one random stream for the checks."""
    rng = np.random.default_rng(PROBE_SEED)
    # one arena for the read, triad and intensity sweeps: first-touching its largest size
    # costs ~0.8 s per 512 MiB on a small VM, so it is paid once, not once per probe (every
    # probe's check writes the values it checks, and the leftovers stay finite and normal)
    arena = ProbeArena()
    fma_accounting = (
        "FLOPs = 2·16·n per pass (16 dependent FMAs per element, SIMD lanes and "
        "elements independent), data L1-resident"
    )
    blas = device.info.extra.get("blas", "unknown")
    return (
        Probe(
            "read",
            "bandwidth",
            partial(setup_read, device, arena, rng=rng),
            accounting="bytes = 8·n per pass (float64 read once), FLOPs = n (adds)",
            note="vectorised sum, one contiguous chunk per thread read as two halves at once",
        ),
        Probe(
            "copy",
            "bandwidth",
            partial(setup_copy, device, arena, rng=rng),
            accounting="bytes = 16·n per pass (STREAM: a, c; write-allocate not counted), "
            "FLOPs = 0",
            note="c = a (+ the pass index), one chunk per thread worked as one stream (as "
            "BabelStream's Copy), arrays staggered",
        ),
        Probe(
            "triad",
            "bandwidth",
            partial(setup_triad, device, arena, rng=rng),
            accounting="bytes = 24·n per pass (STREAM: a, b, c; write-allocate not counted), "
            "FLOPs = 2·n",
            note="a = b + s·c, one chunk per thread worked as two halves at once, arrays "
            "staggered against 4K aliasing (from DRAM: starting 16 B past a cache line)",
        ),
        Probe(
            "fma-fp64",
            "compute",
            partial(setup_fma, device, "fp64", rng=rng),
            dtype="fp64",
            accounting=fma_accounting,
        ),
        Probe(
            "fma-fp32",
            "compute",
            partial(setup_fma, device, "fp32", rng=rng),
            dtype="fp32",
            accounting=fma_accounting,
        ),
        Probe(
            "gemm-fp64",
            "gemm",
            partial(setup_gemm, device, "fp64", rng=rng),
            dtype="fp64",
            accounting="FLOPs = 2·n³ per call; bytes = 3·n²·8 (minimum)",
            note=f"numpy matmul ({blas})",
        ),
        Probe(
            "gemm-fp32",
            "gemm",
            partial(setup_gemm, device, "fp32", rng=rng),
            dtype="fp32",
            accounting="FLOPs = 2·n³ per call; bytes = 3·n²·4 (minimum)",
            note=f"numpy matmul ({blas})",
        ),
        Probe(
            "intensity-fp64",
            "intensity",
            partial(setup_intensity, device, arena, "fp64", rng=rng),
            dtype="fp64",
            accounting="per element: read 8 B + write 8 B from DRAM, k FMAs = 2k FLOPs "
            "→ intensity k/8 FLOP/B",
        ),
        Probe(
            "intensity-fp32",
            "intensity",
            partial(setup_intensity, device, arena, "fp32", rng=rng),
            dtype="fp32",
            accounting="per element: read 4 B + write 4 B from DRAM, k FMAs = 2k FLOPs "
            "→ intensity k/4 FLOP/B",
        ),
    )


def gemm_tolerance(dtype: str, k: int) -> float:
    """The CPU GEMM checks' tolerance: :func:`~roofprof.devices.base.tolerance` at 16 ulps and
    16·eps·√k growth (at least the former ``16·eps·√k``)."""
    return tolerance(dtype, k, ulps=16.0, growth=16.0)


def reference_passes(one_pass_s: float, call_s: float = DRAM_CALL_S) -> int:
    """Passes per call of the reference Dot so that a call lasts ``call_s`` seconds, from the
    time of one pass (seconds; 1 when it is unknown or already long enough).

    >>> reference_passes(0.006), reference_passes(0.05), reference_passes(0.0)
    (4, 1, 1)
    """
    if not one_pass_s > 0:
        return 1
    return max(1, math.ceil(call_s / one_pass_s))


def dot_reference(device: CpuDevice) -> Reference | None:
    """The DRAM bandwidth (bytes/s) of a BabelStream-style Dot, measured now: two freshly
    written, page-distinct float64 arrays of 4 × the last-level cache each (8 × in all),
    every thread over its own chunk, 16 bytes read per element per pass, as many passes per
    call as make a call last :data:`DRAM_CALL_S`, best of 8 calls. The reference the
    roofline's DRAM ceilings are held against (:mod:`roofprof.roofline.plausibility`); None
    when memory is short (the arrays would take over a quarter of what is free).
    """
    k = _kernels()
    llc = device.info.last_level_cache_bytes or (32 << 20)
    n = 4 * llc // 8
    if 2 * 8 * n > device.free_memory_bytes() // 4:
        return None
    a, b = aligned_empty(n, np.float64), aligned_empty(n, np.float64)
    k.fill_distinct(a)
    k.fill_distinct(b)
    out = np.zeros(max(1, device.nthreads))
    clock = device.clock()
    k.dot2(a, b, out, device.nthreads, 1)  # compiled and warm
    clock.start()
    k.dot2(a, b, out, device.nthreads, 1)
    reps = reference_passes(clock.stop())
    best = float("inf")
    for _ in range(8):
        clock.start()
        k.dot2(a, b, out, device.nthreads, reps)
        best = min(best, clock.stop())
    found = [physical_locality(x.ctypes.data, x.nbytes) for x in (a, b)]
    known = [c for c in found if c is not None]
    return Reference(
        16.0 * n * reps / best,
        "a same-run Dot",
        "CpuDevice.memory_reference",
        min(known) if len(known) == len(found) else None,
    )
