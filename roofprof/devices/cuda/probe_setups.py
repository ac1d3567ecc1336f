"""The GPU probe set-ups: each ``probes.cu`` kernel (and the device-to-device copy) sized,
launched and checked, as a :class:`~roofprof.devices.base.ProbeRun`.

``setup_read``/``setup_copy``/``setup_smem``/``setup_d2d`` (bandwidth), ``setup_fma``/
``setup_mma`` (compute) and ``setup_intensity`` (the intensity sweep) each return the run, its
bytes or FLOPs per repetition and its check (:mod:`roofprof.devices.cuda.probe_checks`);
:class:`ProbeArena` is the buffer one sweep's sizes share; :func:`launch_latency` times empty
launches. The catalogue that names them is :mod:`roofprof.devices.cuda.probes`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof.devices.base import CheckResult, ProbeRun
from roofprof.devices.cuda.probe_checks import (
    CHECK_SEED,
    MASK32,
    NEVER,
    POISON,
    flag_check,
    fma_probe_fold,
    intensity_probe_folds,
    merge_checks,
    read_probe_folds,
    smem_probe_fold,
)

if TYPE_CHECKING:
    from roofprof.devices.cuda.device import CudaDevice

__all__ = [
    "FMA_SEED",
    "ITERS_PER_REP",
    "L1_PROBE_SM_FOOTPRINT_BYTES",
    "MAX_ITERS_PER_LAUNCH",
    "SMEM_ITERS_PER_REP",
    "ProbeArena",
    "launch_latency",
    "read_check",
    "setup_copy",
    "setup_d2d",
    "setup_fma",
    "setup_intensity",
    "setup_mma",
    "setup_read",
    "setup_smem",
    "split_iters",
]

ITERS_PER_REP = 256
"""Loop iterations of one repetition of a compute probe (``run(reps)`` issues ``256·reps``)."""
SMEM_ITERS_PER_REP = 64
MAX_ITERS_PER_LAUNCH = 1 << 24
FMA_SEED = 0x2545F490  # low 4 bits zero: y(seed) is exactly the literal (see fma_probe_fold)
#: Bytes each SM's blocks read per pass in the ``read-l1`` probe: fits the L1 of every GPU
#: roofprof supports (sm_80+: 128-256 KiB of combined L1/shared memory per SM; the probe
#: declares no shared memory, so the carveout leaves most of it to L1).
L1_PROBE_SM_FOOTPRINT_BYTES = 64 * 1024


# --------------------------------------------------------------------------- device helpers


def split_iters(total: int, limit: int = MAX_ITERS_PER_LAUNCH) -> list[int]:
    """Split a loop count into launches of at most ``limit`` iterations (int32 kernel argument).

    >>> split_iters(10, 4)
    [4, 4, 2]
    """
    out = [limit] * (total // limit)
    if total % limit:
        out.append(total % limit)
    return out or [0]


class ProbeArena:
    """A growable device buffer (uint8) shared by the sizes of one sweep, filled once with
    random bits."""

    def __init__(self, device: CudaDevice, what: str, seed: int):
        self.device, self.what, self.seed = device, what, seed
        self.buf = None

    def get(self, nbytes: int):
        cp = self.device.cupy
        nbytes = int(-(-nbytes // 256) * 256)
        if self.buf is None or self.buf.size < nbytes:
            self.buf = None
            self.device.release_memory()
            self.device.require(nbytes, self.what)
            words = cp.random.RandomState(self.seed).random_sample(nbytes // 4, dtype=cp.float32)
            words += 0.5  # floats in [0.5, 1.5): fine as bit patterns and as fp32 data
            self.buf = words.view(cp.uint8)
        return self.buf[:nbytes]

    def release(self) -> None:
        self.buf = None


def _cuda_models(device: CudaDevice) -> Any:
    return device.kernels.models


def _u32(x: int) -> np.uint32:
    return np.uint32(x & MASK32)


def _out_buffer(device: CudaDevice, launch: Any) -> Any:
    """A fresh ``out`` word per thread of ``launch``, poisoned."""
    cp = device.cupy
    return cp.full(_cuda_models(device).probe_out_words(launch), POISON, dtype=cp.uint32)


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    return rng if rng is not None else np.random.default_rng(CHECK_SEED)


# --------------------------------------------------------------------------- probe set-ups


def read_check(
    device: CudaDevice, launch: Any, rng: np.random.Generator | None = None, passes: int = 2
) -> CheckResult:
    """``launch``'s read probe (``probe_read_u4`` or ``probe_read_l1_u4``) on a ragged random
    buffer, each of three threads' folds replayed."""
    cp, rng = device.cupy, _rng(rng)
    threads = launch.threads
    n_vec = threads * 5 + 13  # ragged: the 4-way body and the tail both run
    host = rng.integers(0, 2**32, size=(n_vec, 4), dtype=np.uint64).astype(np.uint32)
    src = cp.asarray(host)
    folds = read_probe_folds(host, threads, passes)
    results = []
    for t in (0, threads // 2 + 1, threads - 1):
        out = _out_buffer(device, launch)
        device.launch(
            launch.entry,
            launch.grid,
            launch.block,
            (src, np.int64(n_vec), np.int32(passes), _u32(int(folds[t])), out),
        )
        device.checked(launch.entry)
        results.append(flag_check(cp.asnumpy(out), folds, int(folds[t]), f"thread {t}"))
    return merge_checks(
        results,
        f"{launch.entry} on {n_vec} random 16-byte vectors, {passes} passes, replayed in numpy",
    )


def setup_read(
    device: CudaDevice,
    arena: ProbeArena,
    *,
    working_set_bytes: int,
    fixed_bytes: int | None = None,
    rng: np.random.Generator | None = None,
    level: str = "l2",
) -> ProbeRun:
    """``read`` (and ``read-l2`` with ``fixed_bytes``): ``probe_read_u4`` (``ld.global.cg``,
    L1 bypassed) over the working set, a repetition being one more pass in the same launch.
    ``level="l1"`` (``read-l1``): ``probe_read_l1_u4`` (L1-allocating loads) on a buffer of
    :data:`L1_PROBE_SM_FOOTPRINT_BYTES` per SM (``cuda_models.read_probe_n_vec_for_sm_footprint``),
    so every pass after the first hits each SM's L1."""
    cm, cp, rng = _cuda_models(device), device.cupy, _rng(rng)
    launch = cm.probe_launch(cm.READ_PROBE_ENTRIES[level], device.sm_count)
    ws = fixed_bytes if fixed_bytes is not None else int(working_set_bytes)
    n_vec = max(1024, ws // 16)
    if level == "l1":
        n_vec = cm.read_probe_n_vec_for_sm_footprint(
            L1_PROBE_SM_FOOTPRINT_BYTES, launch, device.sm_count
        )
    buf = arena.get(n_vec * 16).view(cp.uint32)
    out = _out_buffer(device, launch)

    def run(reps: int) -> None:
        for passes in split_iters(int(reps)):
            device.launch(
                launch.entry,
                launch.grid,
                launch.block,
                (buf, np.int64(n_vec), np.int32(passes), _u32(NEVER), out),
            )

    return ProbeRun(
        run=run,
        flops_per_rep=0.0,
        bytes_per_rep=float(cm.read_probe_bytes(n_vec)),
        check=lambda: read_check(device, launch, rng),
        working_set_bytes=n_vec * 16,
        params={
            "n_vec": n_vec,
            "grid": launch.grid[0],
            "block": launch.block[0],
            "entry": launch.entry,
            "sm_footprint_bytes": cm.read_probe_sm_footprint_bytes(n_vec, launch, device.sm_count),
            "repetition": "one more pass in the same launch",
        },
    )


def setup_copy(
    device: CudaDevice,
    arena: ProbeArena,
    *,
    working_set_bytes: int,
    rng: np.random.Generator | None = None,
) -> ProbeRun:
    """``copy``: ``probe_copy_u4`` from one half of the working set to the other."""
    cm, cp, rng = _cuda_models(device), device.cupy, _rng(rng)
    launch = cm.probe_launch("probe_copy_u4", device.sm_count)
    n_vec = max(1024, int(working_set_bytes) // 32)
    buf = arena.get(2 * n_vec * 16)
    src, dst = buf[: n_vec * 16].view(cp.uint32), buf[n_vec * 16 :].view(cp.uint32)

    def run(reps: int) -> None:
        for _ in range(int(reps)):
            device.launch(launch.entry, launch.grid, launch.block, (src, dst, np.int64(n_vec)))

    def check() -> CheckResult:
        m = min(n_vec, launch.threads * 5 + 13)
        host = rng.integers(0, 2**32, size=m * 4, dtype=np.uint64).astype(np.uint32)
        s = cp.asarray(host)
        d = cp.full(m * 4, POISON, dtype=cp.uint32)
        device.launch(launch.entry, launch.grid, launch.block, (s, d, np.int64(m)))
        device.checked(launch.entry)
        bad = int(np.count_nonzero(cp.asnumpy(d) != host))
        return CheckResult(
            bad == 0,
            float(bad),
            bad / (4 * m),
            0.0,
            f"probe_copy_u4 of {m} random 16-byte vectors into a poisoned buffer: "
            f"{bad} word(s) differ",
        )

    return ProbeRun(
        run=run,
        flops_per_rep=0.0,
        bytes_per_rep=float(cm.copy_probe_bytes(n_vec)),
        check=check,
        working_set_bytes=2 * n_vec * 16,
        params={"n_vec": n_vec, "grid": launch.grid[0]},
    )


def setup_smem(
    device: CudaDevice, *, working_set_bytes: int = 0, rng: np.random.Generator | None = None
) -> ProbeRun:
    """``smem``: ``probe_smem_u4``, conflict-free 16-byte shared-memory loads."""
    cm, cp, rng = _cuda_models(device), device.cupy, _rng(rng)
    launch = cm.probe_launch("probe_smem_u4", device.sm_count)
    out = _out_buffer(device, launch)

    def run(reps: int) -> None:
        for iters in split_iters(int(reps) * SMEM_ITERS_PER_REP):
            device.launch(
                launch.entry,
                launch.grid,
                launch.block,
                (np.int32(iters), _u32(7), _u32(NEVER), out),
            )

    def check() -> CheckResult:
        seed, iters = int(rng.integers(1, 2**31)), 11
        folds = smem_probe_fold(np.arange(launch.threads) % launch.block[0], seed, iters)
        results = []
        for x in (0, 77, 255):
            flag = int(folds[x])
            o = _out_buffer(device, launch)
            device.launch(
                launch.entry,
                launch.grid,
                launch.block,
                (np.int32(iters), _u32(seed), _u32(flag), o),
            )
            device.checked(launch.entry)
            results.append(flag_check(cp.asnumpy(o), folds, flag, f"threadIdx {x}"))
        return merge_checks(
            results, f"probe_smem_u4, seed {seed}, {iters} iterations, replayed in numpy"
        )

    return ProbeRun(
        run=run,
        flops_per_rep=0.0,
        bytes_per_rep=float(cm.smem_probe_bytes(SMEM_ITERS_PER_REP, launch)),
        check=check,
        working_set_bytes=cm.PROBE_SMEM_STATIC_BYTES,
        params={"grid": launch.grid[0]},
    )


def setup_d2d(
    device: CudaDevice,
    arena: ProbeArena,
    *,
    working_set_bytes: int,
    rng: np.random.Generator | None = None,
) -> ProbeRun:
    """``d2d-copy``: ``cudaMemcpyAsync`` device to device of half the working set."""
    cp, rng = device.cupy, _rng(rng)
    half = max(1 << 20, int(working_set_bytes) // 2 // 256 * 256)
    buf = arena.get(2 * half)
    src, dst = buf[:half], buf[half:]

    def run(reps: int) -> None:
        for _ in range(int(reps)):
            device.memcpy_d2d(dst, src, half)

    def check() -> CheckResult:
        m = min(half, 8 << 20)
        host = rng.integers(0, 256, size=m, dtype=np.uint8)
        s = cp.asarray(host)
        d = cp.full(m, 0xA5, dtype=cp.uint8)
        device.memcpy_d2d(d, s, m)
        device.checked("cudaMemcpyAsync D2D")
        bad = int(np.count_nonzero(cp.asnumpy(d) != host))
        return CheckResult(
            bad == 0,
            float(bad),
            bad / m,
            0.0,
            f"cudaMemcpyAsync of {m} random bytes into a poisoned buffer: {bad} differ",
        )

    return ProbeRun(
        run=run,
        flops_per_rep=0.0,
        bytes_per_rep=2.0 * half,
        check=check,
        working_set_bytes=2 * half,
        params={"bytes_per_copy": half},
    )


def setup_fma(device: CudaDevice, dtype: str) -> ProbeRun:
    """``fma-<dtype>``: ``probe_fma_<dtype>``; the check replays two threads' chains exactly."""
    cm, cp = _cuda_models(device), device.cupy
    entry = f"probe_fma_{dtype}"
    launch = cm.probe_launch(entry, device.sm_count)
    out = _out_buffer(device, launch)

    def run(reps: int) -> None:
        for iters in split_iters(int(reps) * ITERS_PER_REP):
            device.launch(
                entry,
                launch.grid,
                launch.block,
                (np.int32(iters), np.uint32(FMA_SEED), np.uint32(NEVER), out),
            )

    def check() -> CheckResult:
        iters = 2
        threads = launch.threads
        results = []
        for t in (0, threads - 1):
            tries = []
            for contracted in (True, False):
                fold = fma_probe_fold(dtype, FMA_SEED, t, iters, contracted)
                o = _out_buffer(device, launch)
                device.launch(
                    entry,
                    launch.grid,
                    launch.block,
                    (np.int32(iters), np.uint32(FMA_SEED), np.uint32(fold), o),
                )
                device.checked(entry)
                words = cp.asnumpy(o)
                hit = int(words[t]) == fold
                tries.append((hit, contracted, fold, words))
                if hit:
                    break
            hit, contracted, fold, words = next((x for x in tries if x[0]), tries[-1])
            others = int(
                np.count_nonzero((words != np.uint32(POISON)) & (words != np.uint32(fold)))
            )
            ok = hit and others == 0
            results.append(
                CheckResult(
                    ok,
                    0.0 if ok else 1.0,
                    0.0 if ok else 1.0,
                    0.0,
                    f"thread {t}: {'wrote' if hit else 'did not write'} its replayed fold "
                    f"0x{fold:08x} ({'fused' if contracted else 'unfused'} init)"
                    + (f", {others} stray word(s)" if others else ""),
                )
            )
        return merge_checks(
            results,
            f"probe_fma_{dtype}, {iters} iterations, each chain replayed exactly in "
            "Python (fp64 with fractions)",
        )

    return ProbeRun(
        run=run,
        flops_per_rep=float(cm.fma_probe_flops(dtype, ITERS_PER_REP, launch)),
        bytes_per_rep=0.0,
        check=check,
        working_set_bytes=0,
        params={"grid": launch.grid[0], "iters_per_rep": ITERS_PER_REP},
    )


def setup_mma(device: CudaDevice, dtype: str) -> ProbeRun:
    """``mma.sync-<dtype>``: ``probe_mma_<dtype>``; the check proves every thread finished."""
    cm, cp = _cuda_models(device), device.cupy
    entry = f"probe_mma_{dtype}"
    varies = dtype == "fp8"
    launch = cm.probe_launch(entry, device.sm_count)
    out = _out_buffer(device, launch)

    def run(reps: int) -> None:
        for iters in split_iters(int(reps) * ITERS_PER_REP):
            device.launch(
                entry,
                launch.grid,
                launch.block,
                (np.int32(iters), np.uint32(11), np.uint32(NEVER), out),
            )

    def check() -> CheckResult:
        o = _out_buffer(device, launch)
        flag = NEVER if varies else 0
        device.launch(
            entry, launch.grid, launch.block, (np.int32(3), np.uint32(11), np.uint32(flag), o)
        )
        device.checked(entry)
        words = cp.asnumpy(o)
        if varies:
            stray = int(np.count_nonzero(words != np.uint32(POISON)))
            ok = stray <= max(1, words.size // 1000)
            return CheckResult(
                ok,
                float(stray),
                stray / words.size,
                0.001,
                f"{entry}: ran without a CUDA error, {stray} coincidental write(s) of the flag; "
                "the fp8 product is not replayed (the GEMM checks cover the mma layout)",
            )
        bad = int(np.count_nonzero(words != 0))
        return CheckResult(
            bad == 0,
            float(bad),
            bad / words.size,
            0.0,
            f"{entry}: each thread folds 8 equal accumulators to 0, so with flag 0 every word "
            f"must be 0: {bad} thread(s) did not finish; arithmetic checked by gemm_mma.cu",
        )

    return ProbeRun(
        run=run,
        flops_per_rep=float(cm.mma_probe_flops(dtype, ITERS_PER_REP, launch)),
        bytes_per_rep=0.0,
        check=check,
        working_set_bytes=0,
        params={"grid": launch.grid[0], "iters_per_rep": ITERS_PER_REP},
    )


def setup_intensity(
    device: CudaDevice,
    arena: ProbeArena,
    *,
    working_set_bytes: int,
    fmas_per_element: int,
    rng: np.random.Generator | None = None,
) -> ProbeRun:
    """``intensity-fp32``: ``probe_intensity_fp32`` with ``nfma = max(1, k/2)`` per element."""
    cm, cp, rng = _cuda_models(device), device.cupy, _rng(rng)
    launch = cm.probe_launch("probe_intensity_fp32", device.sm_count)
    nfma = max(1, int(fmas_per_element) // 2)
    n_vec = max(launch.threads * 2, int(working_set_bytes) // 16)
    src = arena.get(n_vec * 16).view(cp.float32)
    out = _out_buffer(device, launch)

    def run(reps: int) -> None:
        for _ in range(int(reps)):
            device.launch(
                launch.entry,
                launch.grid,
                launch.block,
                (src, np.int64(n_vec), np.int32(nfma), _u32(NEVER), out),
            )

    def check() -> CheckResult:
        small = cm.Launch(launch.source, launch.entry, (2, 1, 1), launch.block)
        threads = small.threads
        m = threads * 2 + 5
        host = (rng.random((m, 4)) + 0.5).astype(np.float32)
        s = cp.asarray(host)
        folds = intensity_probe_folds(host, threads, nfma)
        results = []
        for t in (0, threads - 1):
            o = cp.full(threads, POISON, dtype=cp.uint32)
            device.launch(
                small.entry,
                small.grid,
                small.block,
                (s, np.int64(m), np.int32(nfma), _u32(int(folds[t])), o),
            )
            device.checked(small.entry)
            results.append(flag_check(cp.asnumpy(o), folds, int(folds[t]), f"thread {t}"))
        return merge_checks(
            results,
            f"probe_intensity_fp32 with nfma={nfma} on {m} random vectors "
            "(2 blocks), replayed in numpy",
        )

    return ProbeRun(
        run=run,
        flops_per_rep=float(cm.intensity_probe_flops(n_vec, nfma)),
        bytes_per_rep=float(cm.intensity_probe_bytes(n_vec)),
        check=check,
        working_set_bytes=n_vec * 16,
        params={
            "n_vec": n_vec,
            "nfma": nfma,
            "fmas_per_element_asked": int(fmas_per_element),
            "intensity_flop_per_byte": cm.intensity_of(nfma),
        },
    )


def launch_latency(device: CudaDevice, launches: int = 200, rounds: int = 5) -> dict[str, float]:
    """Launch cost of ``probe_empty`` (1 block of 32 threads): GPU time per launch of a
    back-to-back stream (events around ``launches`` launches) and host issue time per launch
    (``perf_counter``), best of ``rounds``. Seconds.
    """
    import time

    cm = _cuda_models(device)
    launch = cm.probe_launch("probe_empty", device.sm_count)
    for _ in range(10):
        device.launch(launch.entry, launch.grid, launch.block, ())
    device.checked(launch.entry)
    gpu, host = math.inf, math.inf
    clock = device.clock()
    for _ in range(rounds):
        device.synchronize()
        t0 = time.perf_counter()
        clock.start()
        for _ in range(launches):
            device.launch(launch.entry, launch.grid, launch.block, ())
        t_host = time.perf_counter() - t0
        elapsed = clock.stop()
        gpu = min(gpu, elapsed / launches)
        host = min(host, t_host / launches)
    return {
        "gpu_s_per_launch": gpu,
        "host_issue_s_per_launch": host,
        "launches": launches,
        "rounds": rounds,
    }
