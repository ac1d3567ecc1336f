"""The GPU probe catalogue: ``kernels/cuda/probes.cu`` plus the vendor references, as :class:`Probe` s.

Each entry has the shape of the CPU catalogue (``roofprof.devices.cpu``) so that
:func:`roofprof.probes.measure_roofline` runs it unchanged:

| probe | kind | level / dtype | kernel | bytes or FLOPs per repetition |
| --- | --- | --- | --- | --- |
| ``read`` | bandwidth (sweep) | from the working set | ``probe_read_u4``, a repetition = one more pass in the same launch | ``16·n_vec`` |
| ``copy`` | bandwidth (sweep) | from the working set | ``probe_copy_u4`` | ``32·n_vec`` (read + write) |
| ``read-l2`` | bandwidth | ``l2`` | ``probe_read_u4`` on L2/4 | ``16·n_vec`` |
| ``smem`` | bandwidth | ``smem`` | ``probe_smem_u4`` | ``iters·8·16`` per thread |
| ``d2d-copy`` | bandwidth | ``dram`` | ``cudaMemcpyAsync`` device to device (what CuPy's copy of a contiguous array does): the vendor reference of the HBM probes | ``2·size`` |
| ``fma-fp64/fp32/fp16x2/bf16x2`` | compute | fp64, fp32, fp16, bf16 | ``probe_fma_*`` | ``cuda_models.fma_probe_flops`` |
| ``mma.sync-bf16/fp16/tf32/fp8/int8`` | compute | same | ``probe_mma_*`` (``mma.sync``: on Hopper below the ``wgmma`` datasheet peak) | ``cuda_models.mma_probe_flops`` |
| ``gemm-bf16/fp16/fp32`` | gemm | same | cuBLAS (``cupy.matmul``; bf16 through ``cublasGemmEx``) | ``2n³`` |
| ``gemm-bf16-torch/fp16-torch`` | gemm | same | ``torch.matmul`` on CUDA (when torch has CUDA) | ``2n³`` |
| ``intensity-fp32`` | intensity | fp32 | ``probe_intensity_fp32`` (``nfma = max(1, k/2)``) | ``2·nfma·4·n_vec`` FLOPs, ``16·n_vec`` bytes |

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

Probes a GPU cannot run (fp8 ``mma.sync`` before sm_89, bf16 before sm_80, torch without
CUDA) are left out of the catalogue and listed by :func:`skipped_probes` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof.devices.base import CheckResult, Probe, ProbeRun

if TYPE_CHECKING:
    from roofprof.devices.cuda import CudaDevice

POISON = 0xA5A5A5A5
"""What a probe's ``out`` words hold before a check (never a fold the host picks as flag)."""
NEVER = 0xFFFFFFFF
"""The ``flag`` passed when timing: a thread writes only when its fold equals it."""
ITERS_PER_REP = 256
"""Loop iterations of one repetition of a compute probe (``run(reps)`` issues ``256·reps``)."""
SMEM_ITERS_PER_REP = 64
MAX_ITERS_PER_LAUNCH = 1 << 24
FMA_SEED = 0x2545F490  # low 4 bits zero: y(seed) is exactly the literal (see fma_probe_fold)
MASK32 = 0xFFFFFFFF


# --------------------------------------------------------------------------- host replays


def hash32(x: Any) -> Any:
    """``hash32`` of probes.cu on Python ints or numpy integer arrays (uint32 arithmetic).

    >>> hex(hash32(0)), hash32(np.array([0, 1])).dtype
    ('0x0', dtype('uint32'))
    """
    if isinstance(x, np.ndarray):
        v = x.astype(np.uint64) & MASK32
        v ^= v >> np.uint64(16)
        v = (v * np.uint64(0x7FEB352D)) & np.uint64(MASK32)
        v ^= v >> np.uint64(15)
        v = (v * np.uint64(0x846CA68B)) & np.uint64(MASK32)
        v ^= v >> np.uint64(16)
        return v.astype(np.uint32)
    v = int(x) & MASK32
    v ^= v >> 16
    v = (v * 0x7FEB352D) & MASK32
    v ^= v >> 15
    v = (v * 0x846CA68B) & MASK32
    v ^= v >> 16
    return v


def _pad_rows(a: np.ndarray, stride: int) -> np.ndarray:
    """[n, ...] → [ceil(n/stride), stride, ...], zero padded (0 is neutral for + and ^)."""
    n = a.shape[0]
    rows = -(-n // stride)
    out = np.zeros((rows * stride, *a.shape[1:]), dtype=a.dtype)
    out[:n] = a
    return out.reshape(rows, stride, *a.shape[1:])


def read_probe_folds(words: np.ndarray, threads: int, passes: int = 1) -> np.ndarray:
    """Per-thread result of ``probe_read_u4``: thread t adds (u32, per component) every
    16-byte vector ``i ≡ t (mod threads)`` ``passes`` times, then folds ``x^y^z^w``.

    ``words`` is the buffer as uint32 ``[n_vec, 4]``. Returns uint32 ``[threads]``.

    >>> read_probe_folds(np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.uint32), 1).tolist()
    [8]
    """
    w = np.asarray(words, dtype=np.uint64).reshape(-1, 4)
    sums = _pad_rows(w, threads).sum(axis=0) * np.uint64(passes)  # [threads, 4]
    sums &= np.uint64(MASK32)
    return (sums[:, 0] ^ sums[:, 1] ^ sums[:, 2] ^ sums[:, 3]).astype(np.uint32)


def smem_probe_fold(thread_in_block: np.ndarray | int, seed: int, iters: int) -> np.ndarray:
    """Result of ``probe_smem_u4`` for threads with these ``threadIdx.x`` (every block alike).

    The block fills ``buf[i] = (hash32(seed^i), hash32(seed+i), i, seed)`` for i < 2048; each
    iteration ``it`` thread ``x`` adds ``buf[((x & 255) + 256 r) ^ ((it & 7) << 5)]`` for r < 8.
    """
    idx = np.arange(2048, dtype=np.uint64)
    buf = np.stack([hash32(idx ^ np.uint64(seed)), hash32((idx + np.uint64(seed)) & np.uint64(MASK32)),
                    idx.astype(np.uint32), np.full(2048, seed & MASK32, np.uint32)], axis=1).astype(np.uint64)
    x = np.atleast_1d(np.asarray(thread_in_block, dtype=np.int64)) & 255
    acc = np.zeros((x.size, 4), dtype=np.uint64)
    # iterations repeat with period 8: count how often each window offset occurs
    for w in range(8):
        times = len(range(w, iters, 8))
        if not times:
            continue
        for r in range(8):
            acc += buf[((x + r * 256) ^ (w << 5))] * np.uint64(times)
    acc &= np.uint64(MASK32)
    return (acc[:, 0] ^ acc[:, 1] ^ acc[:, 2] ^ acc[:, 3]).astype(np.uint32)


def round_to_precision(v: float, bits: int) -> float:
    """Round a finite float64 to ``bits`` significant bits, ties to even (normal range).

    >>> round_to_precision(1.0 + 2**-9, 8), round_to_precision(1.0 + 3 * 2**-8, 8)
    (1.0, 1.015625)
    """
    if v == 0 or not math.isfinite(v):
        return v
    m, e = math.frexp(v)  # v = m * 2**e, 0.5 <= |m| < 1
    scaled = m * 2.0**bits
    return math.ldexp(float(np.rint(scaled)), e - bits)


def _f32(v: float) -> float:
    return float(np.float32(v))


def _fma_f32(x: float, y: float, z: float) -> float:
    # |x|, |y| ~ 1 and z ~ 1e-3: x*y + z is exact in float64 (<= 50 significant bits).
    return _f32(x * y + z)


def _fma_f64(x: float, y: float, z: float) -> float:
    return float(Fraction(x) * Fraction(y) + Fraction(z))


def _fma_f16(x: float, y: float, z: float) -> float:
    return float(np.float16(x * y + z))


def _fma_bf16(x: float, y: float, z: float) -> float:
    return round_to_precision(x * y + z, 8)


def _bits32(v: float) -> int:
    return int(np.array(v, dtype=np.float32).view(np.uint32))


def _bits64_folded(v: float) -> int:
    u = int(np.array(v, dtype=np.float64).view(np.uint64))
    return (u ^ (u >> 32)) & MASK32


def _bits16(v: float) -> int:
    return int(np.array(v, dtype=np.float16).view(np.uint16))


def _bits_bf16(v: float) -> int:
    return int(np.array(v, dtype=np.float32).view(np.uint32)) >> 16


def fma_probe_fold(dtype: str, seed: int, tid: int, iters: int, contracted_init: bool = True) -> int:
    """Exact result word of thread ``tid`` of ``probe_fma_<dtype>`` (fp64, fp32, fp16x2, bf16x2).

    Replays ``fma_body``: 16 chains ``x = fma(x, y, z)`` for ``8·iters`` steps from
    ``init(h + j·0x9e3779b9)``, ``h = hash32(seed ^ tid)``, folded by XOR of their bits.
    ``seed`` must have its low 4 bits zero, so that ``y(seed)`` is exactly the literal.
    ``contracted_init`` chooses whether the compiler fused the init expression
    ``1 + k·1e-3`` into one FMA (fp32/fp64; the check tries both). fp16/bf16 FMAs are fused
    (one rounding), as ``__hfma2`` is documented.

    >>> 0 <= fma_probe_fold("bf16x2", FMA_SEED, 0, 1) < 2**32
    True
    """
    if seed & 0xF:
        raise ValueError("seed must have its low 4 bits zero (y(seed) is then exact)")
    h = hash32(seed ^ tid)
    steps = 8 * iters
    v = 0
    for j in range(16):
        hj = (h + j * 0x9E3779B9) & MASK32
        if dtype == "fp32":
            k = hj & 0xFF
            x = _f32(k * _f32(1e-3) + 1.0) if contracted_init else _f32(_f32(k * _f32(1e-3)) + 1.0)
            y, z = _f32(0.999), _f32(0.001)
            for _ in range(steps):
                x = _fma_f32(x, y, z)
            v ^= _bits32(x)
        elif dtype == "fp64":
            k = hj & 0xFF
            x = float(Fraction(k) * Fraction(1e-3) + 1) if contracted_init else (k * 1e-3) + 1.0
            y, z = 0.999, 0.001
            for _ in range(steps):
                x = _fma_f64(x, y, z)
            v ^= _bits64_folded(x)
        elif dtype in ("fp16x2", "bf16x2"):
            lo = 1.0 + (hj & 0xF) * 0.0625
            hi = 1.0 + ((hj >> 4) & 0xF) * 0.0625
            if dtype == "fp16x2":
                y, z, fma, bits = float(np.float16(_f32(0.99))), float(np.float16(_f32(0.01))), _fma_f16, _bits16
            else:
                y, z = round_to_precision(_f32(0.99), 8), round_to_precision(_f32(0.01), 8)
                fma, bits = _fma_bf16, _bits_bf16
            for _ in range(steps):
                lo, hi = fma(lo, y, z), fma(hi, y, z)
            v ^= bits(lo) | (bits(hi) << 16)
        else:
            raise ValueError(f"unknown FMA probe dtype {dtype!r}; valid: fp64, fp32, fp16x2, bf16x2")
    return v & MASK32


def intensity_probe_folds(values: np.ndarray, threads: int, nfma: int) -> np.ndarray:
    """Per-thread result of ``probe_intensity_fp32``: every fp32 element gets ``nfma`` steps of
    ``x = fma(x, 0.999f, 0.001f)``; thread t XORs the bits of the elements of its vectors
    ``i ≡ t (mod threads)``. ``values`` is float32 ``[n_vec, 4]`` (magnitudes near 1).
    """
    x = np.asarray(values, dtype=np.float32).reshape(-1, 4).astype(np.float64)
    y, z = float(np.float32(0.999)), float(np.float32(0.001))
    for _ in range(nfma):
        x = (x * y + z).astype(np.float32).astype(np.float64)  # exact in float64, one rounding
    bits = x.astype(np.float32).view(np.uint32)
    per_vec = bits[:, 0] ^ bits[:, 1] ^ bits[:, 2] ^ bits[:, 3]
    return np.bitwise_xor.reduce(_pad_rows(per_vec, threads), axis=0).astype(np.uint32)


def flag_check(out_words: np.ndarray, expected_folds: np.ndarray, flag: int, note: str) -> CheckResult:
    """Compare a probe's ``out`` after a launch with ``flag`` against the host's folds.

    Every thread whose fold equals ``flag`` must have written it; every other word must
    still hold :data:`POISON`. ``max_abs_error`` counts the wrong words.
    """
    out = np.asarray(out_words, dtype=np.uint32)
    folds = np.asarray(expected_folds, dtype=np.uint32)
    expected = np.where(folds == np.uint32(flag), np.uint32(flag), np.uint32(POISON))
    bad = int(np.count_nonzero(out != expected))
    writers = int(np.count_nonzero(folds == np.uint32(flag)))
    return CheckResult(bad == 0, float(bad), float(bad) / max(1, out.size), 0.0,
                       f"{note}; flag 0x{flag:08x}: {writers} thread(s) must write, {bad} word(s) wrong")


def merge_checks(results: list[CheckResult], note: str) -> CheckResult:
    """One :class:`CheckResult` for several partial checks (ok when all are)."""
    ok = all(r.ok for r in results)
    worst = max(results, key=lambda r: (not r.ok, r.max_rel_error))
    return CheckResult(ok, worst.max_abs_error, worst.max_rel_error, worst.tolerance,
                       f"{note}: " + "; ".join(r.note for r in results))


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


class _Arena:
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


def _cuda_models(device: CudaDevice):
    return device.kernels.models


# --------------------------------------------------------------------------- catalogue


def skipped_probes(device: CudaDevice) -> list[dict[str, str]]:
    """Probes left out of the catalogue on this GPU, each with the reason."""
    return _catalogue(device)[1]


def cuda_probes(device: CudaDevice) -> tuple[Probe, ...]:
    """The probe catalogue of ``device`` (see the module docstring)."""
    return _catalogue(device)[0]


def _catalogue(device: CudaDevice) -> tuple[tuple[Probe, ...], list[dict[str, str]]]:
    cm = _cuda_models(device)
    cp = device.cupy
    np_rng = np.random.default_rng(20240611)
    sm = device.sm_count
    skipped: list[dict[str, str]] = []
    probes: list[Probe] = []
    arenas = {"read": _Arena(device, "the read probe buffer", 1), "copy": _Arena(device, "the copy probe buffers", 2),
              "l2": _Arena(device, "the L2 read buffer", 3), "d2d": _Arena(device, "the d2d copy buffers", 4),
              "intensity": _Arena(device, "the intensity sweep buffer", 5)}

    def u32(x: int):
        return np.uint32(x & MASK32)

    def out_buffer(launch):
        return cp.full(cm.probe_out_words(launch), POISON, dtype=cp.uint32)

    # -- read (sweep) and read-l2 ---------------------------------------------------------
    def read_check(launch, passes: int = 2) -> CheckResult:
        threads = launch.threads
        n_vec = threads * 5 + 13  # ragged: the 4-way body and the tail both run
        host = np_rng.integers(0, 2**32, size=(n_vec, 4), dtype=np.uint64).astype(np.uint32)
        src = cp.asarray(host)
        folds = read_probe_folds(host, threads, passes)
        results = []
        for t in (0, threads // 2 + 1, threads - 1):
            out = out_buffer(launch)
            device.launch(launch.entry, launch.grid, launch.block,
                          (src, np.int64(n_vec), np.int32(passes), u32(int(folds[t])), out))
            device.checked(launch.entry)
            results.append(flag_check(cp.asnumpy(out), folds, int(folds[t]), f"thread {t}"))
        return merge_checks(results, f"probe_read_u4 on {n_vec} random 16-byte vectors, {passes} passes, "
                                     "replayed in numpy")

    def make_read(arena_key: str, fixed_bytes: int | None = None) -> Callable[..., ProbeRun]:
        def setup(*, working_set_bytes: int) -> ProbeRun:
            launch = cm.probe_launch("probe_read_u4", sm)
            ws = fixed_bytes if fixed_bytes is not None else int(working_set_bytes)
            n_vec = max(1024, ws // 16)
            buf = arenas[arena_key].get(n_vec * 16).view(cp.uint32)
            out = out_buffer(launch)

            def run(reps: int) -> None:
                for passes in _split_iters(int(reps)):
                    device.launch(launch.entry, launch.grid, launch.block,
                                  (buf, np.int64(n_vec), np.int32(passes), u32(NEVER), out))

            return ProbeRun(run=run, flops_per_rep=0.0, bytes_per_rep=float(cm.read_probe_bytes(n_vec)),
                            check=lambda: read_check(launch), working_set_bytes=n_vec * 16,
                            params={"n_vec": n_vec, "grid": launch.grid[0], "block": launch.block[0],
                                    "repetition": "one more pass in the same launch"})

        return setup

    probes.append(Probe("read", "bandwidth", make_read("read"),
                        accounting="bytes = 16·n_vec per pass (uint4 __ldg loads, grid-stride, 4 in flight)",
                        note=f"probe_read_u4, grid {4 * sm} blocks × 256 (4 per SM)"))

    # -- copy (sweep) ------------------------------------------------------------------------
    def setup_copy(*, working_set_bytes: int) -> ProbeRun:
        launch = cm.probe_launch("probe_copy_u4", sm)
        n_vec = max(1024, int(working_set_bytes) // 32)
        buf = arenas["copy"].get(2 * n_vec * 16)
        src, dst = buf[: n_vec * 16].view(cp.uint32), buf[n_vec * 16:].view(cp.uint32)

        def run(reps: int) -> None:
            for _ in range(int(reps)):
                device.launch(launch.entry, launch.grid, launch.block, (src, dst, np.int64(n_vec)))

        def check() -> CheckResult:
            m = min(n_vec, launch.threads * 5 + 13)
            host = np_rng.integers(0, 2**32, size=m * 4, dtype=np.uint64).astype(np.uint32)
            s = cp.asarray(host)
            d = cp.full(m * 4, POISON, dtype=cp.uint32)
            device.launch(launch.entry, launch.grid, launch.block, (s, d, np.int64(m)))
            device.checked(launch.entry)
            bad = int(np.count_nonzero(cp.asnumpy(d) != host))
            return CheckResult(bad == 0, float(bad), bad / (4 * m), 0.0,
                               f"probe_copy_u4 of {m} random 16-byte vectors into a poisoned buffer: "
                               f"{bad} word(s) differ")

        return ProbeRun(run=run, flops_per_rep=0.0, bytes_per_rep=float(cm.copy_probe_bytes(n_vec)), check=check,
                        working_set_bytes=2 * n_vec * 16, params={"n_vec": n_vec, "grid": launch.grid[0]})

    probes.append(Probe("copy", "bandwidth", setup_copy,
                        accounting="bytes = 32·n_vec per launch (16 read + 16 written per vector)",
                        note="probe_copy_u4, uint4 loads and stores, 4 in flight"))

    # -- L2-resident read ---------------------------------------------------------------
    if device.l2_bytes:
        l2_ws = max(64 * 1024, device.l2_bytes // 4 // 4096 * 4096)
        probes.append(Probe("read-l2", "bandwidth", make_read("l2", l2_ws), level="l2",
                            accounting="bytes = 16·n_vec per pass; buffer L2/4, every pass after the warm-up hits L2",
                            note=f"probe_read_u4 on {l2_ws // 1024} KiB (L2/4), passes in one launch"))
    else:
        skipped.append({"probe": "read-l2", "reason": "the L2 size is unknown"})

    # -- shared memory --------------------------------------------------------------------
    def setup_smem(*, working_set_bytes: int = 0) -> ProbeRun:
        launch = cm.probe_launch("probe_smem_u4", sm)
        out = out_buffer(launch)

        def run(reps: int) -> None:
            for iters in _split_iters(int(reps) * SMEM_ITERS_PER_REP):
                device.launch(launch.entry, launch.grid, launch.block, (np.int32(iters), u32(7), u32(NEVER), out))

        def check() -> CheckResult:
            seed, iters = int(np_rng.integers(1, 2**31)), 11
            folds = smem_probe_fold(np.arange(launch.threads) % launch.block[0], seed, iters)
            results = []
            for x in (0, 77, 255):
                flag = int(folds[x])
                o = out_buffer(launch)
                device.launch(launch.entry, launch.grid, launch.block, (np.int32(iters), u32(seed), u32(flag), o))
                device.checked(launch.entry)
                results.append(flag_check(cp.asnumpy(o), folds, flag, f"threadIdx {x}"))
            return merge_checks(results, f"probe_smem_u4, seed {seed}, {iters} iterations, replayed in numpy")

        return ProbeRun(run=run, flops_per_rep=0.0,
                        bytes_per_rep=float(cm.smem_probe_bytes(SMEM_ITERS_PER_REP, launch)), check=check,
                        working_set_bytes=cm.PROBE_SMEM_STATIC_BYTES, params={"grid": launch.grid[0]})

    probes.append(Probe("smem", "bandwidth", setup_smem, level="smem",
                        accounting="bytes = iters·8·16 per thread (conflict-free LDS.128)",
                        note="probe_smem_u4, 32 KiB static shared memory per block"))

    # -- device-to-device copy (vendor reference for HBM) ---------------------------------------
    def setup_d2d(*, working_set_bytes: int) -> ProbeRun:
        half = max(1 << 20, int(working_set_bytes) // 2 // 256 * 256)
        buf = arenas["d2d"].get(2 * half)
        src, dst = buf[:half], buf[half:]

        def copy(s, d, n) -> None:
            device.memcpy_d2d(d, s, n)

        def run(reps: int) -> None:
            for _ in range(int(reps)):
                copy(src, dst, half)

        def check() -> CheckResult:
            m = min(half, 8 << 20)
            host = np_rng.integers(0, 256, size=m, dtype=np.uint8)
            s = cp.asarray(host)
            d = cp.full(m, 0xA5, dtype=cp.uint8)
            copy(s, d, m)
            device.checked("cudaMemcpyAsync D2D")
            bad = int(np.count_nonzero(cp.asnumpy(d) != host))
            return CheckResult(bad == 0, float(bad), bad / m, 0.0,
                               f"cudaMemcpyAsync of {m} random bytes into a poisoned buffer: {bad} differ")

        return ProbeRun(run=run, flops_per_rep=0.0, bytes_per_rep=2.0 * half, check=check,
                        working_set_bytes=2 * half, params={"bytes_per_copy": half})

    probes.append(Probe("d2d-copy", "bandwidth", setup_d2d, level="dram",
                        accounting="bytes = 2·size per copy (read + write), as the HBM copy probe counts",
                        note="cudaMemcpyAsync device to device (CuPy's copy of a contiguous array): "
                             "the vendor reference of the HBM probes, at the sweep's largest working set"))

    # -- FMA compute probes -----------------------------------------------------------------
    for fdt in cm.FMA_PROBE_DTYPES:
        reason = device.unsupported(fdt, "fma")
        name = f"fma-{fdt}"
        if reason:
            skipped.append({"probe": name, "reason": reason})
            continue
        probes.append(Probe(name, "compute", _fma_setup(device, fdt, out_buffer), dtype=cm.FMA_PROBE_ROOFLINE_DTYPE[fdt],
                            accounting=f"FLOPs = 2·{cm.FMA_LANES[fdt]}·16·8·iters per thread "
                                       "(16 independent chains, 8 repeats per iteration)",
                            note=f"probe_fma_{fdt}, {4 * sm} blocks × 256"))

    # -- mma.sync probes ------------------------------------------------------------------------
    for mdt in cm.MMA_PROBE_DTYPES:
        reason = device.unsupported(mdt, "mma.sync")
        name = f"mma.sync-{mdt}"
        if reason:
            skipped.append({"probe": name, "reason": reason})
            continue
        native = cm.fp8_mma_sync_native(device.cc) if mdt == "fp8" else True
        note = "mma.sync (the ceiling gemm_mma.cu can reach; on Hopper below the wgmma datasheet peak)"
        if mdt == "fp8" and native is not True:
            note += f"; fp8 mma.sync on sm_{device.cc[0]}{device.cc[1]}: " + (
                cm.FP8_MMA_SYNC_SASS.get(tuple(device.cc), "SASS not checked for this architecture"))
        m, n, k = cm.MMA_SHAPES[mdt]
        probes.append(Probe(name, "compute", _mma_setup(device, mdt, out_buffer), dtype=mdt,
                            accounting=f"FLOPs = warps·8·iters·2·{m}·{n}·{k} (m{m}n{n}k{k}, 8 independent accumulators)"
                                       + (" (integer ops)" if mdt == "int8" else ""),
                            note=note))

    # -- cuBLAS and torch GEMMs ---------------------------------------------------------------------
    from roofprof.devices.cuda_impls import CublasGemm, TorchGemm, gemm_probe_setup
    from roofprof.workload import Op

    for gdt, backend in (("bf16", "cublas"), ("fp16", "cublas"), ("fp32", "cublas"), ("bf16", "torch"),
                         ("fp16", "torch")):
        name = f"gemm-{gdt}" + ("-torch" if backend == "torch" else "")
        impl = CublasGemm(device) if backend == "cublas" else TorchGemm(device)
        reason = impl.supports(Op(name, "gemm", "prefill", 256, 256, 256, gdt, 0.0, 0.0))
        if reason:
            skipped.append({"probe": name, "reason": reason})
            continue
        how = ("torch.matmul(a, w.t()) on CUDA (cuBLAS/cuBLASLt)" if backend == "torch" else
               "cuBLAS: " + ("cublasGemmEx, bf16 in, fp32 accumulate" if gdt == "bf16" else "cupy.matmul"))
        probes.append(Probe(name, "gemm", gemm_probe_setup(device, gdt, backend), dtype=gdt,
                            accounting="FLOPs = 2·n³ per call; bytes = 3·n²·itemsize (minimum)",
                            note=how + ", C = A·Wᵀ (nn.Linear layout)"))

    # -- intensity sweep ---------------------------------------------------------------------------
    def setup_intensity(*, working_set_bytes: int, fmas_per_element: int) -> ProbeRun:
        launch = cm.probe_launch("probe_intensity_fp32", sm)
        nfma = max(1, int(fmas_per_element) // 2)
        n_vec = max(launch.threads * 2, int(working_set_bytes) // 16)
        src = arenas["intensity"].get(n_vec * 16).view(cp.float32)
        out = out_buffer(launch)

        def run(reps: int) -> None:
            for _ in range(int(reps)):
                device.launch(launch.entry, launch.grid, launch.block,
                              (src, np.int64(n_vec), np.int32(nfma), u32(NEVER), out))

        def check() -> CheckResult:
            small = cm.Launch(launch.source, launch.entry, (2, 1, 1), launch.block)
            threads = small.threads
            m = threads * 2 + 5
            host = (np_rng.random((m, 4)) + 0.5).astype(np.float32)
            s = cp.asarray(host)
            folds = intensity_probe_folds(host, threads, nfma)
            results = []
            for t in (0, threads - 1):
                o = cp.full(threads, POISON, dtype=cp.uint32)
                device.launch(small.entry, small.grid, small.block, (s, np.int64(m), np.int32(nfma), u32(int(folds[t])), o))
                device.checked(small.entry)
                results.append(flag_check(cp.asnumpy(o), folds, int(folds[t]), f"thread {t}"))
            return merge_checks(results, f"probe_intensity_fp32 with nfma={nfma} on {m} random vectors "
                                         "(2 blocks), replayed in numpy")

        return ProbeRun(run=run, flops_per_rep=float(cm.intensity_probe_flops(n_vec, nfma)),
                        bytes_per_rep=float(cm.intensity_probe_bytes(n_vec)), check=check,
                        working_set_bytes=n_vec * 16,
                        params={"n_vec": n_vec, "nfma": nfma, "fmas_per_element_asked": int(fmas_per_element),
                                "intensity_flop_per_byte": cm.intensity_of(nfma)})

    probes.append(Probe("intensity-fp32", "intensity", setup_intensity, dtype="fp32",
                        accounting="per fp32 element read: nfma dependent FMAs (2·nfma FLOPs), 4 bytes; nothing "
                                   "written → intensity nfma/2 FLOP/B; nfma = max(1, k/2) for the plan's k",
                        note="probe_intensity_fp32 (mixbench-style), L2 flushed before each call"))
    return tuple(probes), skipped


def _fma_setup(device: CudaDevice, fdt: str, out_buffer: Callable[[Any], Any]) -> Callable[..., ProbeRun]:
    cm = _cuda_models(device)
    cp = device.cupy
    entry = f"probe_fma_{fdt}"

    def setup() -> ProbeRun:
        launch = cm.probe_launch(entry, device.sm_count)
        out = out_buffer(launch)

        def run(reps: int) -> None:
            for iters in _split_iters(int(reps) * ITERS_PER_REP):
                device.launch(entry, launch.grid, launch.block, (np.int32(iters), np.uint32(FMA_SEED),
                                                                 np.uint32(NEVER), out))

        def check() -> CheckResult:
            iters = 2
            threads = launch.threads
            results = []
            for t in (0, threads - 1):
                tries = []
                for contracted in (True, False):
                    fold = fma_probe_fold(fdt, FMA_SEED, t, iters, contracted)
                    o = out_buffer(launch)
                    device.launch(entry, launch.grid, launch.block,
                                  (np.int32(iters), np.uint32(FMA_SEED), np.uint32(fold), o))
                    device.checked(entry)
                    words = cp.asnumpy(o)
                    hit = int(words[t]) == fold
                    tries.append((hit, contracted, fold, words))
                    if hit:
                        break
                hit, contracted, fold, words = next((x for x in tries if x[0]), tries[-1])
                others = int(np.count_nonzero((words != np.uint32(POISON)) & (words != np.uint32(fold))))
                ok = hit and others == 0
                results.append(CheckResult(ok, 0.0 if ok else 1.0, 0.0 if ok else 1.0, 0.0,
                                           f"thread {t}: {'wrote' if hit else 'did not write'} its replayed fold "
                                           f"0x{fold:08x} ({'fused' if contracted else 'unfused'} init)"
                                           + (f", {others} stray word(s)" if others else "")))
            return merge_checks(results, f"probe_fma_{fdt}, {iters} iterations, each chain replayed exactly in "
                                         "Python (fp64 with fractions)")

        return ProbeRun(run=run, flops_per_rep=float(cm.fma_probe_flops(fdt, ITERS_PER_REP, launch)),
                        bytes_per_rep=0.0, check=check, working_set_bytes=0,
                        params={"grid": launch.grid[0], "iters_per_rep": ITERS_PER_REP})

    return setup


def _mma_setup(device: CudaDevice, mdt: str, out_buffer: Callable[[Any], Any]) -> Callable[..., ProbeRun]:
    cm = _cuda_models(device)
    cp = device.cupy
    entry = f"probe_mma_{mdt}"
    varies = mdt == "fp8"

    def setup() -> ProbeRun:
        launch = cm.probe_launch(entry, device.sm_count)
        out = out_buffer(launch)

        def run(reps: int) -> None:
            for iters in _split_iters(int(reps) * ITERS_PER_REP):
                device.launch(entry, launch.grid, launch.block, (np.int32(iters), np.uint32(11), np.uint32(NEVER), out))

        def check() -> CheckResult:
            o = out_buffer(launch)
            flag = NEVER if varies else 0
            device.launch(entry, launch.grid, launch.block, (np.int32(3), np.uint32(11), np.uint32(flag), o))
            device.checked(entry)
            words = cp.asnumpy(o)
            if varies:
                stray = int(np.count_nonzero(words != np.uint32(POISON)))
                ok = stray <= max(1, words.size // 1000)
                return CheckResult(ok, float(stray), stray / words.size, 0.001,
                                   f"{entry}: ran without a CUDA error, {stray} coincidental write(s) of the flag; "
                                   "the fp8 product is not replayed (the GEMM checks cover the mma layout)")
            bad = int(np.count_nonzero(words != 0))
            return CheckResult(bad == 0, float(bad), bad / words.size, 0.0,
                               f"{entry}: each thread folds 8 equal accumulators to 0, so with flag 0 every word "
                               f"must be 0: {bad} thread(s) did not finish; arithmetic checked by gemm_mma.cu")

        return ProbeRun(run=run, flops_per_rep=float(cm.mma_probe_flops(mdt, ITERS_PER_REP, launch)),
                        bytes_per_rep=0.0, check=check, working_set_bytes=0,
                        params={"grid": launch.grid[0], "iters_per_rep": ITERS_PER_REP})

    return setup


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
    return {"gpu_s_per_launch": gpu, "host_issue_s_per_launch": host, "launches": launches, "rounds": rounds}


__all__ = ["NEVER", "POISON", "cuda_probes", "flag_check", "fma_probe_fold", "hash32", "intensity_probe_folds",
           "launch_latency", "read_probe_folds", "round_to_precision", "skipped_probes", "smem_probe_fold"]
