"""Each CPU kernel (kernels/cpu.py) against its numpy reference, on small random inputs."""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest
from roofprof.kernels import cpu as k

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("n", [8, 1000, 4099])
@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_read_sum(n, nthreads):
    x = RNG.random(n) + 0.5
    out = np.zeros(nthreads)
    got = k.read_sum(x, out, nthreads, 3)
    assert got == pytest.approx(k.read_sum_reference(x, 3), rel=1e-12)
    assert out.sum() == pytest.approx(got)


@pytest.mark.parametrize("n", [16, 1001, 5000])
@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_triad(n, nthreads):
    b, c = RNG.random(n), RNG.random(n)
    a = np.full(n, np.nan)
    k.triad(a, b, c, 0.5, nthreads, 4)
    np.testing.assert_allclose(a, k.triad_reference(b, c, 0.5, 4), rtol=1e-15)


def test_flush_read_and_fill():
    buf = np.empty(1003)
    k.fill(buf, 2.0)
    assert np.all(buf == 2.0)
    for nthreads in (1, 2, 3):
        out = np.zeros(nthreads)
        assert k.flush_read(buf, out, nthreads) == 2006.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fmas", [1, 2, 4, 8, 16, 32, 256])
def test_fma_chain(dtype, fmas):
    n = 4 * k.FMA_BLOCK
    x0 = (RNG.random(n) + 0.5).astype(dtype)
    x = x0.copy()
    a, c = dtype(1 - 2**-10), dtype(2**-12)
    u, reps = k.fma_split(fmas)
    assert u * reps == fmas and u in k.FMA_UNROLLS
    k.fma_chain(x, a, c, u, reps, k.FMA_BLOCK)
    ref = k.fma_chain_reference(x0, a, c, fmas)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(x, ref, rtol=4 * fmas * eps, atol=0)


def test_fma_chain_reference_closed_form():
    x = np.array([1.0, 2.0])
    v = x.copy()
    for _ in range(5):
        v = v * 0.5 + 0.25
    np.testing.assert_allclose(k.fma_chain_reference(x, 0.5, 0.25, 5), v)
    np.testing.assert_allclose(k.fma_chain_reference(x, 1.0, 0.25, 4), x + 1.0)


def test_fma_split_rejects_bad_counts():
    for bad in (0, 3, 12, -4):
        with pytest.raises(ValueError):
            k.fma_split(bad)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly check")
def test_fma_chain_is_not_folded_by_the_compiler():
    """The FLOP accounting needs every FMA of the chain executed: 1+2+4+8+16 per vector body."""
    from numba import njit

    f = njit(fastmath={"contract"}, nogil=True)(k._chain_block.py_func)
    x = np.ones(64)
    f(x, 1.0, 0.0, 16, 1)
    asm = next(iter(f.inspect_asm().values()))
    packed = re.findall(r"vfmadd\w*p[sd]\s", asm)
    assert len(packed) >= 1 + 2 + 4 + 8 + 16


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n,kk", [(1, 33, 70), (5, 17, 128), (40, 9, 3)])
def test_gemm_nt(dtype, m, n, kk):
    a = RNG.standard_normal((m, kk)).astype(dtype)
    w = RNG.standard_normal((n, kk)).astype(dtype)
    out = np.full((m, n), np.nan, dtype=dtype)
    k.gemm_nt(a, w, out)
    ref = k.gemm_nt_reference(a, w)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(out, ref, atol=16 * eps * np.sqrt(kk) * np.abs(ref).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_nt_batched(dtype):
    a = RNG.standard_normal((3, 4, 20)).astype(dtype)
    w = RNG.standard_normal((3, 6, 20)).astype(dtype)
    out = np.full((3, 4, 6), np.nan, dtype=dtype)
    k.gemm_nt_batched(a, w, out)
    ref = k.gemm_nt_reference(a, w)
    assert ref.shape == (3, 4, 6)
    np.testing.assert_allclose(out, ref, atol=64 * np.finfo(dtype).eps * np.abs(ref).max())


def test_gemm_flops():
    assert k.gemm_flops(2, 3, 4) == 48.0
    assert k.gemm_flops(2, 3, 4, batch=5) == 240.0


@pytest.mark.parametrize("n", [8, 15, 16, 17, 31, 1000, 4099, 65537])
@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_bandwidth_kernels_touch_every_element_exactly_once_per_pass(n, nthreads):
    # powers of two per element: a sum that skips or repeats any element (the halves and
    # tails of each thread's chunk) comes out different, exactly
    x = 2.0 ** -(np.arange(n) % 40)
    out = np.zeros(nthreads)
    assert k.read_sum(x, out, nthreads, 2) == 2 * float(np.sum(x))
    c = np.full(n, np.nan)
    k.copy(x, c, nthreads, 3)
    np.testing.assert_array_equal(c, x + 2.0)
    a = np.full(n, np.nan)
    k.triad(a, x, x, 0.5, nthreads, 2)
    np.testing.assert_array_equal(a, x + 1.5 * x)


def _streams_per_loop(asm: str, op: str) -> int:
    """Most distinct base registers that one basic block of ``asm`` loads ``op`` from (the
    streams its loop reads)."""
    best, bases = 0, set()
    for line in asm.splitlines():
        if re.match(r"^\.?\w+:", line):
            best, bases = max(best, len(bases)), set()
        m = re.search(op + r"\s+-?\d*\((%\w+),%\w+,8\), %[xyz]mm", line)
        if m:
            bases.add(m.group(1))
    return max(best, len(bases))


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 assembly")
def test_the_dram_read_streams_two_halves_per_thread_like_a_dot():
    """One stream per thread reads DRAM slower than BabelStream's Dot (two arrays); the read
    kernel's inner loop reads its chunk's two halves at once."""
    import numba

    f = numba.njit(parallel=True, fastmath=True, nogil=True)(k.read_sum.py_func)
    x = np.ones(4096)
    assert f(x, np.zeros(2), 2, 1) == 4096.0
    asm = "\n".join(f.inspect_asm().values())
    assert _streams_per_loop(asm, "vaddpd") == 2
