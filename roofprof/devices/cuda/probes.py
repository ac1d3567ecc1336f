"""The GPU probe catalogue: ``kernels/cuda/probes.cu`` plus the vendor references, as :class:`Probe` s.

Each entry has the shape of the CPU catalogue (``roofprof.devices.cpu``) so that
:func:`roofprof.probes.measure_roofline` runs it unchanged:

| probe | kind | level / dtype | kernel | bytes or FLOPs per repetition |
| --- | --- | --- | --- | --- |
| ``read`` | bandwidth (sweep) | from the working set | ``probe_read_u4`` (``ld.global.cg``: L2 only, never L1), a repetition = one more pass in the same launch | ``16·n_vec`` |
| ``copy`` | bandwidth (sweep) | from the working set | ``probe_copy_u4`` | ``32·n_vec`` (read + write) |
| ``read-l2`` | bandwidth | ``l2`` | ``probe_read_u4`` (``ld.global.cg``: L1 bypassed) on L2/4 | ``16·n_vec`` |
| ``read-l1`` | bandwidth | ``l1`` | ``probe_read_l1_u4`` (L1-allocating) on 64 KiB per SM | ``16·n_vec`` |
| ``smem`` | bandwidth | ``smem`` | ``probe_smem_u4`` | ``iters·8·16`` per thread |
| ``d2d-copy`` | bandwidth | ``dram`` | ``cudaMemcpyAsync`` device to device (what CuPy's copy of a contiguous array does): the vendor reference of the HBM probes | ``2·size`` |
| ``fma-fp64/fp32/fp16x2/bf16x2`` | compute | fp64, fp32, fp16, bf16 | ``probe_fma_*`` | ``cuda_models.fma_probe_flops`` |
| ``mma.sync-bf16/fp16/tf32/fp8/int8`` | compute | same | ``probe_mma_*`` (``mma.sync``: on Hopper below the ``wgmma`` datasheet peak) | ``cuda_models.mma_probe_flops`` |
| ``gemm-bf16/fp16/fp32/tf32`` | gemm | same | cuBLAS (``cupy.matmul``; bf16 and tf32 — ``CUBLAS_COMPUTE_32F_FAST_TF32`` — through ``cublasGemmEx``) | ``2n³`` |
| ``gemm-fp8-torch`` | gemm | fp8 | ``torch._scaled_mm`` (e4m3, per-tensor scales, bf16 out; sm_89+) | ``2n³`` |
| ``gemm-bf16-torch/fp16-torch`` | gemm | same | ``torch.matmul`` on CUDA (when torch has CUDA) | ``2n³`` |
| ``intensity-fp32`` | intensity | fp32 | ``probe_intensity_fp32`` (``nfma = max(1, k/2)``) | ``2·nfma·4·n_vec`` FLOPs, ``16·n_vec`` bytes |

On sm_90+ the fp8, tf32 and int8 ``mma.sync`` probes are *diagnostics*
(``Probe.diagnostic``): their rate is recorded, labelled, but never the dtype's ceiling
(fp8 ``mma.sync`` is emulated there and all three run below the native ``wgmma`` path);
the fp8 and tf32 ceilings come from ``gemm-fp8-torch`` and ``gemm-tf32``.

The roofline's bf16 (fp16) ceiling is the highest of its ``mma.sync`` probe and the cuBLAS
and torch GEMMs (``Roofline.compute_ceiling`` takes the maximum): the attainable tensor
ceiling, while the ``mma.sync`` probe stays in the result as its own ceiling (what
``gemm_mma.cu`` can reach).

**Checks before timing.** Every probe's ``check()`` compares against a host reference:
the read, shared-memory and intensity probes and the FMA probes are replayed exactly in
numpy (:func:`read_probe_folds`, :func:`smem_probe_fold`, :func:`intensity_probe_folds`,
:func:`fma_probe_fold`): the host computes each thread's folded result and passes one of
them as ``flag``, so exactly the threads with that value must write it (every other word
keeps its poison). The copies compare every byte. The ``mma.sync`` probes fold eight equal
accumulators, so each thread's word is 0 whatever the tensor core computes: their check
only proves every thread ran to the end; the instruction's arithmetic is checked by
``gemm_mma.cu`` against a float64 reference (``roofprof selftest``). The GEMMs compare a
sampled block of the output with float64 numpy.

Probes a GPU cannot run (fp8 ``mma.sync`` before sm_89 or when CuPy's NVRTC is older than
12.4 — ``probes.cu`` then compiles ``probe_mma_fp8`` to an empty kernel, see
``cuda_models.fp8_mma_probe_unavailable`` —, bf16 before sm_80, torch without CUDA) are left
out of the catalogue and listed by :func:`skipped_probes` with the reason.
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof._resources import kernels_module
from roofprof.devices.base import CheckResult, Probe, ProbeRun
from roofprof.devices.cuda._runtime import nvrtc_version
from roofprof.devices.cuda.impls import (
    CublasGemm,
    TorchGemm,
    gemm_probe_setup,
    torch_fp8_gemm_reason,
    torch_fp8_gemm_setup,
)
from roofprof.workload import Op

if TYPE_CHECKING:
    from roofprof.devices.cuda.device import CudaDevice

__all__ = [
    "FMA_SEED",
    "ITERS_PER_REP",
    "L1_PROBE_SM_FOOTPRINT_BYTES",
    "MMA_DIAGNOSTIC_DTYPES",
    "MMA_DIAGNOSTIC_MIN_CC",
    "NEVER",
    "POISON",
    "SMEM_ITERS_PER_REP",
    "ProbeArena",
    "cuda_probes",
    "flag_check",
    "fma_probe_fold",
    "hash32",
    "intensity_probe_folds",
    "launch_latency",
    "merge_checks",
    "read_check",
    "read_probe_folds",
    "round_to_precision",
    "setup_copy",
    "setup_d2d",
    "setup_fma",
    "setup_intensity",
    "setup_mma",
    "setup_read",
    "setup_smem",
    "skipped_probes",
    "smem_probe_fold",
]

#: The replays of probes.cu live beside the gemv/gemm replays in ``kernels/cuda_models.py``.
_cm = kernels_module("cuda_models")
hash32 = _cm.hash32
read_probe_folds = _cm.read_probe_folds
smem_probe_fold = _cm.smem_probe_fold
fma_probe_fold = _cm.fma_probe_fold
intensity_probe_folds = _cm.intensity_probe_folds
round_to_precision = _cm.round_to_precision
MASK32 = _cm.MASK32

POISON = 0xA5A5A5A5
"""What a probe's ``out`` words hold before a check (never a fold the host picks as flag)."""
NEVER = 0xFFFFFFFF
"""The ``flag`` passed when timing: a thread writes only when its fold equals it."""
ITERS_PER_REP = 256
"""Loop iterations of one repetition of a compute probe (``run(reps)`` issues ``256·reps``)."""
SMEM_ITERS_PER_REP = 64
MAX_ITERS_PER_LAUNCH = 1 << 24
FMA_SEED = 0x2545F490  # low 4 bits zero: y(seed) is exactly the literal (see fma_probe_fold)
#: Seed of the random stream the probe checks draw from.
CHECK_SEED = 20240611
#: mma.sync dtypes that are diagnostics, never ceilings, from this compute capability on: Hopper
#: and Blackwell run fp8 (emulated: F2FP + HMMA), tf32 and int8 mma.sync below their native
#: tensor path (wgmma/tcgen05), which only library GEMMs reach.
MMA_DIAGNOSTIC_DTYPES = ("fp8", "tf32", "int8")
MMA_DIAGNOSTIC_MIN_CC = (9, 0)
#: Bytes each SM's blocks read per pass in the ``read-l1`` probe: fits the L1 of every GPU
#: roofprof supports (sm_80+: 128-256 KiB of combined L1/shared memory per SM; the probe
#: declares no shared memory, so the carveout leaves most of it to L1).
L1_PROBE_SM_FOOTPRINT_BYTES = 64 * 1024


# --------------------------------------------------------------------------- checks


def flag_check(
    out_words: np.ndarray, expected_folds: np.ndarray, flag: int, note: str
) -> CheckResult:
    """Compare a probe's ``out`` after a launch with ``flag`` against the host's folds.

    Every thread whose fold equals ``flag`` must have written it; every other word must
    still hold :data:`POISON`. ``max_abs_error`` counts the wrong words.
    """
    out = np.asarray(out_words, dtype=np.uint32)
    folds = np.asarray(expected_folds, dtype=np.uint32)
    expected = np.where(folds == np.uint32(flag), np.uint32(flag), np.uint32(POISON))
    bad = int(np.count_nonzero(out != expected))
    writers = int(np.count_nonzero(folds == np.uint32(flag)))
    return CheckResult(
        bad == 0,
        float(bad),
        float(bad) / max(1, out.size),
        0.0,
        f"{note}; flag 0x{flag:08x}: {writers} thread(s) must write, {bad} word(s) wrong",
    )


def merge_checks(results: list[CheckResult], note: str) -> CheckResult:
    """One :class:`CheckResult` for several partial checks (ok when all are)."""
    ok = all(r.ok for r in results)
    worst = max(results, key=lambda r: (not r.ok, r.max_rel_error))
    return CheckResult(
        ok,
        worst.max_abs_error,
        worst.max_rel_error,
        worst.tolerance,
        f"{note}: " + "; ".join(r.note for r in results),
    )


# --------------------------------------------------------------------------- device helpers


def _split_iters(total: int, limit: int = MAX_ITERS_PER_LAUNCH) -> list[int]:
    """Split a loop count into launches of at most ``limit`` iterations (int32 kernel argument).

    >>> _split_iters(10, 4)
    [4, 4, 2]
    """
    out = [limit] * (total // limit)
    if total % limit:
        out.append(total % limit)
    return out or [0]


class ProbeArena:
    """A growable device buffer (uint8) shared by the sizes of one sweep, filled once with random bits."""

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
        for passes in _split_iters(int(reps)):
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
        for iters in _split_iters(int(reps) * SMEM_ITERS_PER_REP):
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
        for iters in _split_iters(int(reps) * ITERS_PER_REP):
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
        for iters in _split_iters(int(reps) * ITERS_PER_REP):
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


# --------------------------------------------------------------------------- catalogue


def skipped_probes(device: CudaDevice) -> list[dict[str, str]]:
    """Probes left out of the catalogue on this GPU, each with the reason."""
    return _catalogue(device)[1]


def cuda_probes(device: CudaDevice) -> tuple[Probe, ...]:
    """The probe catalogue of ``device`` (see the module docstring)."""
    return _catalogue(device)[0]


def _catalogue(device: CudaDevice) -> tuple[tuple[Probe, ...], list[dict[str, str]]]:
    cm = _cuda_models(device)
    rng = np.random.default_rng(CHECK_SEED)
    sm = device.sm_count
    skipped: list[dict[str, str]] = []
    probes: list[Probe] = []

    def arena(what: str, seed: int) -> ProbeArena:
        return ProbeArena(device, what, seed)

    probes.append(
        Probe(
            "read",
            "bandwidth",
            partial(setup_read, device, arena("the read probe buffer", 1), rng=rng),
            accounting="bytes = 16·n_vec per pass (uint4 ld.global.cg loads: L2 only, L1 bypassed; "
            "grid-stride, 4 in flight)",
            note=f"probe_read_u4, grid {4 * sm} blocks × 256 (4 per SM)",
        )
    )
    probes.append(
        Probe(
            "copy",
            "bandwidth",
            partial(setup_copy, device, arena("the copy probe buffers", 2), rng=rng),
            accounting="bytes = 32·n_vec per launch (16 read + 16 written per vector)",
            note="probe_copy_u4, uint4 loads and stores, 4 in flight",
        )
    )
    if device.l2_bytes:
        l2_ws = max(64 * 1024, device.l2_bytes // 4 // 4096 * 4096)
        probes.append(
            Probe(
                "read-l2",
                "bandwidth",
                partial(
                    setup_read, device, arena("the L2 read buffer", 3), fixed_bytes=l2_ws, rng=rng
                ),
                level="l2",
                accounting="bytes = 16·n_vec per pass; buffer L2/4, ld.global.cg loads (L1 bypassed), "
                "so every pass after the warm-up is served by L2, never by L1",
                note=f"probe_read_u4 on {l2_ws // 1024} KiB (L2/4), passes in one launch",
            )
        )
    else:
        skipped.append({"probe": "read-l2", "reason": "the L2 size is unknown"})
    probes.append(
        Probe(
            "read-l1",
            "bandwidth",
            partial(
                setup_read,
                device,
                arena("the L1 read buffer", 6),
                fixed_bytes=0,
                level="l1",
                rng=rng,
            ),
            level="l1",
            accounting=f"bytes = 16·n_vec per pass; {L1_PROBE_SM_FOOTPRINT_BYTES // 1024} KiB per SM "
            "with L1-allocating __ldg loads, every pass after the first hits L1",
            note=f"probe_read_l1_u4, n_vec sized so each SM's 4 blocks read "
            f"{L1_PROBE_SM_FOOTPRINT_BYTES // 1024} KiB per pass; the L1 ceiling (all SMs)",
        )
    )
    probes.append(
        Probe(
            "smem",
            "bandwidth",
            partial(setup_smem, device, rng=rng),
            level="smem",
            accounting="bytes = iters·8·16 per thread (conflict-free LDS.128)",
            note="probe_smem_u4, 32 KiB static shared memory per block",
        )
    )
    probes.append(
        Probe(
            "d2d-copy",
            "bandwidth",
            partial(setup_d2d, device, arena("the d2d copy buffers", 4), rng=rng),
            level="dram",
            accounting="bytes = 2·size per copy (read + write), as the HBM copy probe counts",
            note="cudaMemcpyAsync device to device (CuPy's copy of a contiguous array): "
            "the vendor reference of the HBM probes, at the sweep's largest working set",
        )
    )
    for fdt in cm.FMA_PROBE_DTYPES:
        reason = device.unsupported(fdt, "fma")
        name = f"fma-{fdt}"
        if reason:
            skipped.append({"probe": name, "reason": reason})
            continue
        probes.append(
            Probe(
                name,
                "compute",
                partial(setup_fma, device, fdt),
                dtype=cm.FMA_PROBE_ROOFLINE_DTYPE[fdt],
                accounting=f"FLOPs = 2·{cm.FMA_LANES[fdt]}·16·8·iters per thread "
                "(16 independent chains, 8 repeats per iteration)",
                note=f"probe_fma_{fdt}, {4 * sm} blocks × 256",
            )
        )
    for mdt in cm.MMA_PROBE_DTYPES:
        reason = device.unsupported(mdt, "mma.sync")
        if mdt == "fp8" and not reason:
            # under NVRTC < 12.4 probes.cu compiles probe_mma_fp8 to an empty kernel: never time it
            reason = cm.fp8_mma_probe_unavailable(nvrtc_version(device.cupy), tuple(device.cc))
        name = f"mma.sync-{mdt}"
        if reason:
            skipped.append({"probe": name, "reason": reason})
            continue
        native = cm.fp8_mma_sync_native(device.cc) if mdt == "fp8" else True
        note = (
            "mma.sync (the ceiling gemm_mma.cu can reach; on Hopper below the wgmma datasheet peak)"
        )
        if mdt == "fp8" and native is not True:
            note += f"; fp8 mma.sync on sm_{device.cc[0]}{device.cc[1]}: " + (
                cm.FP8_MMA_SYNC_SASS.get(tuple(device.cc), "SASS not checked for this architecture")
            )
        diagnostic = mdt in MMA_DIAGNOSTIC_DTYPES and tuple(device.cc) >= MMA_DIAGNOSTIC_MIN_CC
        if diagnostic:
            note += (
                f"; diagnostic on sm_{device.cc[0]}{device.cc[1]}: mma.sync {mdt} runs below the native "
                f"tensor path (wgmma), so it is never the {mdt} ceiling — "
                + (
                    "gemm-fp8-torch (torch._scaled_mm) gives that"
                    if mdt == "fp8"
                    else "gemm-tf32 (cuBLAS, fast-tf32 compute) gives that"
                    if mdt == "tf32"
                    else "no int8 library GEMM probe here, so the roofline has no int8 ceiling"
                )
            )
        m, n, k = cm.MMA_SHAPES[mdt]
        probes.append(
            Probe(
                name,
                "compute",
                partial(setup_mma, device, mdt),
                dtype=mdt,
                accounting=f"FLOPs = warps·8·iters·2·{m}·{n}·{k} (m{m}n{n}k{k}, 8 independent accumulators)"
                + (" (integer ops)" if mdt == "int8" else ""),
                note=note,
                diagnostic=diagnostic,
            )
        )
    for gdt, backend in (
        ("bf16", "cublas"),
        ("fp16", "cublas"),
        ("fp32", "cublas"),
        ("tf32", "cublas"),
        ("bf16", "torch"),
        ("fp16", "torch"),
    ):
        name = f"gemm-{gdt}" + ("-torch" if backend == "torch" else "")
        impl = CublasGemm(device) if backend == "cublas" else TorchGemm(device)
        reason = impl.supports(
            Op(name, "gemm", "prefill", 256, 256, 256, gdt, 0.0, 0.0, fn="linear")
        )
        if reason:
            skipped.append({"probe": name, "reason": reason})
            continue
        how = (
            "torch.matmul(a, w.t()) on CUDA (cuBLAS/cuBLASLt)"
            if backend == "torch"
            else "cuBLAS: "
            + (
                "cublasGemmEx, bf16 in, fp32 accumulate"
                if gdt == "bf16"
                else "cublasGemmEx, fp32 in, CUBLAS_COMPUTE_32F_FAST_TF32"
                if gdt == "tf32"
                else "cupy.matmul"
            )
        )
        probes.append(
            Probe(
                name,
                "gemm",
                gemm_probe_setup(device, gdt, backend),
                dtype=gdt,
                accounting="FLOPs = 2·n³ per call; bytes = 3·n²·itemsize (minimum)",
                note=how + ", C = A·Wᵀ (nn.Linear layout)",
            )
        )
    reason = torch_fp8_gemm_reason(device)
    if reason:
        skipped.append({"probe": "gemm-fp8-torch", "reason": reason})
    else:
        probes.append(
            Probe(
                "gemm-fp8-torch",
                "gemm",
                torch_fp8_gemm_setup(device),
                dtype="fp8",
                accounting="FLOPs = 2·n³ per call; bytes = 2·n² (e4m3 A, W) + 2·n² (bf16 C)",
                note="torch._scaled_mm, e4m3 A·Wᵀ, per-tensor scales 1.0, bf16 out (cuBLASLt: "
                "the native fp8 tensor path)",
            )
        )
    skipped.append(
        {
            "probe": "gemm-int8",
            "reason": "no int8 library GEMM probe (cuBLASLt int8 is not wired "
            "here); int8 mma.sync is the only int8 rate",
        }
    )
    probes.append(
        Probe(
            "intensity-fp32",
            "intensity",
            partial(setup_intensity, device, arena("the intensity sweep buffer", 5), rng=rng),
            dtype="fp32",
            accounting="per fp32 element read: nfma dependent FMAs (2·nfma FLOPs), 4 bytes; nothing "
            "written → intensity nfma/2 FLOP/B; nfma = max(1, k/2) for the plan's k",
            note="probe_intensity_fp32 (mixbench-style), L2 flushed before each call",
        )
    )
    return tuple(probes), skipped


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
