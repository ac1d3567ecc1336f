"""Exact numpy/Python replays of the probe kernels' per-thread results (``probes.cu``).

Used by the host's checks (``roofprof.devices.cuda.probes``) and by the fake GPU of the tests:
:func:`hash32`, the folds of the read, shared-memory, FMA and intensity probes, and
:func:`round_to_precision`. They sit beside the gemv/gemm replays and import nothing from
roofprof. Errors are ``ValueError``.

>>> hex(hash32(0))
'0x0'
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = [
    "MASK32",
    "fma_probe_fold",
    "hash32",
    "intensity_probe_folds",
    "read_probe_folds",
    "round_to_precision",
    "smem_probe_fold",
]


MASK32 = 0xFFFFFFFF
"""uint32 arithmetic mask of the replays."""


def hash32(x: int | np.ndarray) -> int | np.ndarray:
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
    buf = np.stack(
        [
            hash32(idx ^ np.uint64(seed)),
            hash32((idx + np.uint64(seed)) & np.uint64(MASK32)),
            idx.astype(np.uint32),
            np.full(2048, seed & MASK32, np.uint32),
        ],
        axis=1,
    ).astype(np.uint64)
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


def fma_probe_fold(
    dtype: str, seed: int, tid: int, iters: int, contracted_init: bool = True
) -> int:
    """Exact result word of thread ``tid`` of ``probe_fma_<dtype>`` (fp64, fp32, fp16x2, bf16x2).

    Replays ``fma_body``: 16 chains ``x = fma(x, y, z)`` for ``8·iters`` steps from
    ``init(h + j·0x9e3779b9)``, ``h = hash32(seed ^ tid)``, folded by XOR of their bits.
    ``seed`` must have its low 4 bits zero, so that ``y(seed)`` is exactly the literal.
    ``contracted_init`` chooses whether the compiler fused the init expression
    ``1 + k·1e-3`` into one FMA (fp32/fp64; the check tries both). fp16/bf16 FMAs are fused
    (one rounding), as ``__hfma2`` is documented.

    >>> 0 <= fma_probe_fold("bf16x2", 0x2545F490, 0, 1) < 2**32
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
                y, z, fma, bits = (
                    float(np.float16(_f32(0.99))),
                    float(np.float16(_f32(0.01))),
                    _fma_f16,
                    _bits16,
                )
            else:
                y, z = round_to_precision(_f32(0.99), 8), round_to_precision(_f32(0.01), 8)
                fma, bits = _fma_bf16, _bits_bf16
            for _ in range(steps):
                lo, hi = fma(lo, y, z), fma(hi, y, z)
            v ^= bits(lo) | (bits(hi) << 16)
        else:
            raise ValueError(
                f"unknown FMA probe dtype {dtype!r}; valid: fp64, fp32, fp16x2, bf16x2"
            )
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
