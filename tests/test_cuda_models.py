"""CPU tests of kernels/cuda_models.py: the numpy replays of the CUDA C kernels' index arithmetic
against ``A @ B.T`` on ragged shapes, the FLOP/byte models against hand-computed numbers, the
launch geometry, and that the Python constants match the ``.cu`` sources."""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest
from roofprof.kernels import cuda_models as cm


def rand(rng, shape, dtype="bf16"):
    return cm.round_to(rng.standard_normal(shape), dtype).astype(np.float64)


# ------------------------------------------------------------------ mma.sync fragment layout
def test_fragment_coords_cover_each_element_once():
    ar, ac = cm.mma_a_coords()
    bk, bn = cm.mma_b_coords()
    cr, cc = cm.mma_c_coords()
    assert len({(r, c) for r, c in zip(ar.ravel(), ac.ravel(), strict=True)}) == 256
    assert len({(k, n) for k, n in zip(bk.ravel(), bn.ravel(), strict=True)}) == 128
    assert len({(r, c) for r, c in zip(cr.ravel(), cc.ravel(), strict=True)}) == 128
    # PTX ISA examples: lane 5 (g=1, t=1) holds a0,a1 = A[1][2..3], a6,a7 = A[9][10..11]
    assert (ar[5, 0].tolist(), ac[5, 0].tolist()) == ([1, 1], [2, 3])
    assert (ar[5, 3].tolist(), ac[5, 3].tolist()) == ([9, 9], [10, 11])
    assert (bk[5, 1].tolist(), bn[5, 1].tolist()) == ([10, 11], [1, 1])
    assert (cr[5].tolist(), cc[5].tolist()) == ([1, 1, 9, 9], [2, 3, 2, 3])


def test_mma_model_equals_matmul():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((16, 16)), rng.standard_normal((16, 8))
    ar, ac = cm.mma_a_coords()
    bk, bn = cm.mma_b_coords()
    d = cm.mma_m16n8k16(np.zeros((32, 4)), A[ar, ac], B[bk, bn])
    C = np.zeros((16, 8))
    cr, cc = cm.mma_c_coords()
    C[cr, cc] = d
    np.testing.assert_allclose(C, A @ B, rtol=1e-13)


def test_ldmatrix_delivers_the_documented_fragment():
    smem = np.arange(16 * 32, dtype=np.float64).reshape(16, 32)  # value = row * 32 + col
    lanes = np.arange(32)
    regs = cm.ldmatrix_x4(smem, lanes & 15, lanes >> 4)  # A addressing, no swizzle
    g, t = lanes >> 2, lanes & 3
    np.testing.assert_array_equal(regs[:, 0, 0], g * 32 + 2 * t)  # a0: A[g][2t]
    np.testing.assert_array_equal(regs[:, 1, 1], (g + 8) * 32 + 2 * t + 1)  # a3: A[g+8][2t+1]
    np.testing.assert_array_equal(regs[:, 2, 0], g * 32 + 8 + 2 * t)  # a4: A[g][2t+8]


def test_swizzle_removes_ldmatrix_bank_conflicts():
    rows = np.arange(8)
    plain = rows * cm.GEMM_BK * 2 + 0 * 16  # 64-byte rows, chunk 0, no swizzle
    assert cm.bank_conflict_ways(plain) == 4
    for chunk in range(cm.GEMM_CHUNKS):
        for base in range(0, cm.GEMM_BM, 8):
            r = base + rows
            addr = r * cm.GEMM_BK * 2 + cm.gemm_swizzle(r, chunk) * 16
            assert cm.bank_conflict_ways(addr) == 1


# ------------------------------------------------------------------ GEMM tiling model
@pytest.mark.parametrize("M", [1, 17, 130])
@pytest.mark.parametrize("N", [8, 136])
@pytest.mark.parametrize("K", [16, 48, 264])
def test_gemm_model_matches_reference_on_ragged_shapes(M, N, K):
    rng = np.random.default_rng(M * 1000 + N * 10 + K)
    A, B = rand(rng, (M, K)), rand(rng, (N, K))
    C = cm.gemm_mma_model(A, B)
    assert not np.isnan(C).any()
    np.testing.assert_allclose(C, A @ B.T, rtol=1e-12, atol=1e-12)


def test_gemm_model_bank_check_and_output_rounding():
    rng = np.random.default_rng(7)
    A, B = rand(rng, (130, 40), "fp16"), rand(rng, (9, 40), "fp16")
    ref = A @ B.T
    C = cm.gemm_mma_model(A, B, out_dtype="fp16", check_banks=True)
    assert C.dtype == np.float32
    np.testing.assert_allclose(C, ref, rtol=2**-10, atol=1e-6)
    C_bf = cm.gemm_mma_model(A, B, out_dtype="bf16")
    np.testing.assert_array_equal(C_bf, cm.round_to(cm.gemm_mma_model(A, B), "bf16"))


def _gemm_module():
    """The module whose globals gemm_mma_model reads (cuda_models re-exports it)."""
    return importlib.import_module(cm.gemm_mma_model.__module__)


def test_gemm_model_catches_a_wrong_fragment_layout(monkeypatch):
    rng = np.random.default_rng(3)
    A, B = rand(rng, (20, 32)), rand(rng, (12, 32))
    good_k, good_n = cm.mma_b_coords()
    # swap b0b1/b2b3
    monkeypatch.setattr(_gemm_module(), "mma_b_coords", lambda: (good_k[:, ::-1], good_n))
    assert not np.allclose(cm.gemm_mma_model(A, B), A @ B.T)


def test_gemm_model_catches_a_swizzle_mismatch(monkeypatch):
    rng = np.random.default_rng(4)
    A, B = rand(rng, (20, 32)), rand(rng, (12, 32))
    real = cm.ldmatrix_x4
    monkeypatch.setattr(
        _gemm_module(), "ldmatrix_x4", lambda s, r, c: real(s, r, c ^ ((r >> 1) & 3))
    )
    assert not np.allclose(cm.gemm_mma_model(A, B), A @ B.T)


def test_gemm_model_rejects_k_not_multiple_of_8():
    with pytest.raises(ValueError, match="K % 8"):
        cm.gemm_mma_model(np.ones((4, 12)), np.ones((4, 12)))
    with pytest.raises(ValueError, match="K % 8"):
        cm.gemm_launch(4, 4, 12, "bf16")
    assert not cm.gemm_supported(4, 4, 12) and cm.gemm_supported(1, 1, 8)


# ------------------------------------------------------------------ GEMV split-K model
@pytest.mark.parametrize("M", [1, 3, 16, 17])
@pytest.mark.parametrize("N", [1, 37])
@pytest.mark.parametrize(("K", "splits"), [(8, 1), (100, 1), (100, 3), (264, 7), (4099, 5)])
def test_gemv_model_matches_reference(M, N, K, splits):
    rng = np.random.default_rng(M + 7 * N + 31 * K + splits)
    x, W = rand(rng, (M, K)), rand(rng, (N, K))
    cov = np.zeros(K, dtype=np.int64)
    y = cm.gemv_model(x, W, splits=splits, coverage=cov)
    np.testing.assert_allclose(y, x @ W.T, rtol=1e-10, atol=1e-10)
    # every k consumed exactly once per (row tile): once per row tile of 16 rows
    assert np.all(cov == -(-M // cm.gemv_m_tile(M)))


@pytest.mark.parametrize("vec_ok", [True, False])
def test_gemv_model_scalar_path_and_small_row_tile(vec_ok):
    rng = np.random.default_rng(11)
    x, W = rand(rng, (7, 45)), rand(rng, (5, 45))
    y = cm.gemv_model(x, W, splits=2, vec_ok=vec_ok, m_tile=2)
    np.testing.assert_allclose(y, x @ W.T, rtol=1e-10, atol=1e-10)


def test_gemv_model_unaligned_k_chunk_falls_back_to_scalar():
    rng = np.random.default_rng(12)
    x, W = rand(rng, (2, 50)), rand(rng, (3, 50))
    parts = cm.gemv_partition(50, 4, 13)
    assert [p.n_vec for p in parts] == [1, 0, 0, 0]  # only split 0 starts 8-aligned
    cov = np.zeros(50, dtype=np.int64)
    y = cm.gemv_model(x, W, splits=4, k_chunk=13, coverage=cov)
    np.testing.assert_allclose(y, x @ W.T, rtol=1e-10, atol=1e-10)
    assert np.all(cov == 1)


@pytest.mark.parametrize("K", [1, 7, 8, 9, 100, 4096, 14336, 4099])
@pytest.mark.parametrize("splits", [1, 2, 3, 7, 64])
def test_gemv_partition_is_exact(K, splits):
    s, k_chunk = cm.gemv_chunking(K, splits)
    assert s <= splits and (s == 1 or k_chunk % 8 == 0)
    parts = cm.gemv_partition(K, s, k_chunk)
    assert parts[0].k_begin == 0 and parts[-1].k_end == K
    for a, b in zip(parts, parts[1:], strict=False):
        assert a.k_end == b.k_begin
    assert all(p.k_end > p.k_begin for p in parts), "no empty split"
    for p in parts[:-1]:  # only the last split can have a scalar tail
        assert p.k_tail == p.k_end
    covered = np.concatenate([cm.gemv_lane_elements(p, lane) for p in parts for lane in range(32)])
    np.testing.assert_array_equal(np.sort(covered), np.arange(K))


def test_gemv_vec_ok_rules():
    assert cm.gemv_vec_ok(4096, 4096)
    assert not cm.gemv_vec_ok(4099, 4099)
    assert not cm.gemv_vec_ok(4096, 4096, x_addr=8)
    assert cm.gemv_vec_ok(4104, 4104, 256, 512)


def test_gemv_split_heuristic():
    assert cm.gemv_splits(4096, 4096, 132) == (1, 4096)  # 512 blocks >= 2 * 132
    assert cm.gemv_splits(1024, 4096, 132) == (3, 1368)  # 128 blocks: ceil(264/128) = 3
    assert cm.gemv_splits(8, 1024, 132) == (2, 512)  # capped by K // 512
    assert cm.gemv_splits(8, 100, 132) == (1, 100)
    for N, K in [(1024, 4096), (8, 14336), (64, 8192)]:
        s, k_chunk = cm.gemv_splits(N, K, 132)
        assert s * k_chunk >= K > (s - 1) * k_chunk and k_chunk % 8 == 0


def test_gemv_plan_geometry():
    p = cm.gemv_plan(1, 4096, 4096, "bf16", sm_count=132)
    assert (p.main.entry, p.main.grid, p.main.block, p.reduce) == (
        "gemv_bf16_m1",
        (512, 1, 1),
        (256, 1, 1),
        None,
    )
    assert p.workspace_bytes == 0 and p.flops == 2 * 4096 * 4096
    p = cm.gemv_plan(5, 1000, 4096, "fp16", sm_count=132, splits=4)
    assert p.main.entry == "gemv_splitk_fp16_m8" and p.main.grid == (125, 4, 1)
    assert p.k_chunk == 1024 and p.workspace_bytes == 4 * 5 * 1000 * 4
    assert p.reduce.entry == "gemv_splitk_reduce_fp16" and p.reduce.grid == (20, 1, 1)
    for launch in (p.main, p.reduce):
        assert launch.entry in cm.ENTRY_SIGNATURES and launch.dynamic_smem_bytes == 0
        assert launch.grid[1] <= 65535 and np.prod(launch.block) <= 1024
    with pytest.raises(ValueError, match="dtype"):
        cm.gemv_plan(1, 8, 8, "fp32", sm_count=1)
    with pytest.raises(ValueError, match="ldx"):
        cm.gemv_plan(1, 8, 16, "bf16", sm_count=1, ldx=8)
    with pytest.raises(ValueError, match="positive"):
        cm.gemv_plan(0, 8, 16, "bf16", sm_count=1)


# ------------------------------------------------------------------ FLOP / byte models
def test_gemv_flops_and_bytes_by_hand():
    assert cm.gemv_flops(1, 4096, 4096) == 33_554_432
    # W 4096*4096*2 + x 4096*2 + y 4096*2
    assert cm.gemv_bytes(1, 4096, 4096, "bf16") == 33_554_432 + 8_192 + 8_192
    # split 3, M=4, N=1024, K=4096: W 8 MiB + x 32 KiB + y 8 KiB + ws 2*3*4*1024*4
    assert cm.gemv_bytes(4, 1024, 4096, "fp16", 3) == 8_388_608 + 32_768 + 8_192 + 98_304
    # M=17 > 16: W read twice
    assert cm.gemv_bytes(17, 8, 8, "bf16") == 2 * 128 + 17 * 16 + 17 * 16
    assert cm.gemv_reduce_flops(4, 1024, 3) == 12_288 and cm.gemv_reduce_flops(4, 8, 1) == 0


def test_gemm_flops_and_bytes_by_hand():
    assert cm.gemm_flops(4096, 4096, 4096) == 137_438_953_472
    assert cm.gemm_bytes(4096, 4096, 4096, "bf16") == 3 * 4096 * 4096 * 2
    assert cm.gemm_bytes(128, 128, 64, "bf16", "fp32") == 98_304
    # 2x2 blocks: A read by 2 column blocks, B by 2 row blocks
    assert cm.gemm_l2_bytes(256, 256, 64, "bf16") == 65_536 + 65_536 + 131_072
    assert cm.gemm_mma_count(128, 128, 32) == 256
    for shape in [(128, 128, 32), (256, 384, 96)]:  # tile multiples: issued == algorithmic
        assert cm.gemm_mma_count(*shape) * cm.MMA_M16N8K16_FLOPS == cm.gemm_flops(*shape)
    assert cm.gemm_mma_count(1, 1, 8) * cm.MMA_M16N8K16_FLOPS == 2 * 128 * 128 * 32


def test_probe_models_by_hand():
    launch = cm.probe_launch("probe_fma_fp32", 132)
    assert launch.grid == (528, 1, 1) and launch.threads == 135_168
    assert cm.fma_probe_flops("fp32", 1000, launch) == 2 * 16 * 8 * 1000 * 135_168
    assert cm.fma_probe_flops("bf16x2", 1, launch) == 4 * 16 * 8 * 135_168
    mma = cm.probe_launch("probe_mma_bf16", 132)
    assert cm.mma_probe_flops("bf16", 10, mma) == 4224 * 8 * 10 * 4096
    assert cm.mma_probe_flops("tf32", 1, mma) == 4224 * 8 * 2048
    assert (
        cm.mma_probe_flops("fp8", 1, mma) == cm.mma_probe_flops("int8", 1, mma) == 4224 * 8 * 8192
    )
    smem = cm.probe_launch("probe_smem_u4", 132)
    assert smem.static_smem_bytes == 32_768 <= cm.STATIC_SMEM_LIMIT_BYTES
    assert cm.smem_probe_bytes(100, smem) == 100 * 8 * 16 * 135_168
    assert cm.read_probe_bytes(1 << 20, passes=3) == 3 * 16 * (1 << 20)
    assert cm.copy_probe_bytes(10) == 320
    assert cm.intensity_probe_flops(1000, 6) == 48_000 and cm.intensity_probe_bytes(1000) == 16_000
    assert cm.intensity_of(6) == 3.0
    assert cm.probe_launch("probe_empty", 132).grid == (1, 1, 1)
    assert cm.probe_out_words(launch) == launch.threads
    with pytest.raises(ValueError, match="unknown probe"):
        cm.probe_launch("gemm_mma_bf16_bf16", 132)


def test_fp8_support_table():
    assert not cm.fp8_mma_probe_supported((8, 0)) and cm.fp8_mma_probe_supported((9, 0))
    assert cm.fp8_mma_sync_native((8, 9)) is True
    assert cm.fp8_mma_sync_native((9, 0)) is False
    assert cm.fp8_mma_sync_native((7, 5)) is None


@pytest.mark.parametrize(
    ("nvrtc", "cc", "available"),
    [
        ((12, 1), (9, 0), False),
        ((12, 3), (8, 9), False),
        ((11, 8), (9, 0), False),
        ((12, 4), (8, 9), True),
        ((12, 9), (9, 0), True),
        ((13, 0), (10, 0), True),
        ((13, 0), (8, 6), False),
        ((12, 9), (8, 0), False),
        (None, (9, 0), False),
    ],
)
def test_fp8_probe_availability_by_compiler_and_gpu(nvrtc, cc, available):
    why = cm.fp8_mma_probe_unavailable(nvrtc, cc)
    assert (why is None) == available, why
    if not available:
        assert "fp8 mma.sync" in why
        if tuple(cc) < (8, 9):
            assert f"sm_{cc[0]}{cc[1]}" in why
        elif nvrtc is not None:
            assert f"{nvrtc[0]}.{nvrtc[1]}" in why and "12.4" in why


def test_fp8_probe_availability_rejects_malformed_versions():
    for bad in ((12,), "12.4", (12, "x"), 12):
        with pytest.raises(ValueError, match="nvrtc_version"):
            cm.fp8_mma_probe_unavailable(bad, (9, 0))
    with pytest.raises(ValueError, match="cc"):
        cm.fp8_mma_probe_unavailable((12, 4), None)


def test_fp8_guard_in_source_matches_the_model():
    """probes.cu's preprocessor test and FP8_MMA_MIN_NVRTC must name the same release."""
    text = cm.source_path("probes.cu").read_text()
    major, minor = cm.FP8_MMA_MIN_NVRTC
    assert (
        f"__CUDACC_VER_MAJOR__ > {major} || (__CUDACC_VER_MAJOR__ == {major} && "
        f"__CUDACC_VER_MINOR__ >= {minor})"
    ) in text
    assert f"__CUDA_ARCH__ >= {cm.FP8_MMA_MIN_CC[0]}{cm.FP8_MMA_MIN_CC[1]}0" in text
    # both fp8 asm sites sit behind the combined guard, none behind a bare arch test
    assert text.count("#if ROOFPROF_FP8_MMA") == 2
    assert "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890\n" not in text


# ------------------------------------------------------------------ read probes: access pattern
@pytest.mark.parametrize("n_vec", [1, 7, 64, 64 * 4 + 3, 64 * 9 + 63, 64 * 12])
def test_read_probe_replay_partitions_the_buffer(n_vec):
    """Over all blocks each vector is read exactly once per pass; per thread the 4-way body
    and the tail together cover i = t, t + s, ...; every pass repeats the same vectors."""
    launch = cm.Launch("probes.cu", "probe_read_u4", (4, 1, 1), (16, 1, 1))
    per_block = [cm.read_probe_vectors(n_vec, launch, b) for b in range(4)]
    seen = np.concatenate(per_block)
    assert np.array_equal(np.sort(seen), np.arange(n_vec))
    for b, vecs in enumerate(per_block):  # block b owns the residues [16b, 16b + 16) mod 64
        assert np.all((vecs % 64) // 16 == b)


@pytest.mark.parametrize(
    ("n_vec", "grid", "sm"), [(1000, 8, 2), (64 * 5, 4, 4), (7, 6, 3), (64 * 8 + 17, 8, 2)]
)
def test_read_probe_sm_footprint_matches_the_replay(n_vec, grid, sm):
    launch = cm.Launch("probes.cu", "probe_read_u4", (grid, 1, 1), (16, 1, 1))
    largest = max(len(np.unique(cm.read_probe_vectors(n_vec, launch, b))) for b in range(grid))
    expected = -(-grid // sm) * largest * 16
    assert cm.read_probe_sm_footprint_bytes(n_vec, launch, sm) == expected


def test_l2_probe_share_per_sm_fits_l1_hence_the_bypassing_loads():
    """The desk-check's numbers: the L2/4 buffer and the read sweep's L2 window put at most a
    few hundred KB on each SM, i.e. in reach of a 256 KB L1: with L1-cached loads every pass
    after the first would hit L1. probe_read_u4 therefore loads with ld.global.cg."""
    for l2_bytes, sms in ((50 << 20, 132), (60_000_000, 132), (40 << 20, 108)):
        launch = cm.probe_launch("probe_read_u4", sms)
        per_sm = cm.read_probe_sm_footprint_bytes(l2_bytes // 4 // 16, launch, sms)
        assert 64 * 1024 < per_sm <= 256 * 1024, per_sm
    text = cm.source_path("probes.cu").read_text()
    assert "read_body<LoadL2>(src, n_vec, passes, flag, out);" in text
    assert "read_body<LoadL1>(src, n_vec, passes, flag, out);" in text
    assert "return __ldcg(p);" in text


def test_l1_probe_sizing_inverts_the_footprint():
    for sms in (1, 108, 132):
        launch = cm.probe_launch("probe_read_l1_u4", sms)
        for budget in (64 * 1024, 100_000, 16 * 256 * 4):
            n_vec = cm.read_probe_n_vec_for_sm_footprint(budget, launch, sms)
            assert n_vec % launch.threads == 0
            assert cm.read_probe_sm_footprint_bytes(n_vec, launch, sms) <= budget
            bigger = n_vec + launch.threads
            assert cm.read_probe_sm_footprint_bytes(bigger, launch, sms) > budget
    with pytest.raises(ValueError, match="one vector per thread"):
        cm.read_probe_n_vec_for_sm_footprint(1000, cm.probe_launch("probe_read_l1_u4", 4), 4)


# ------------------------------------------------------------------ launch-hiding delay
def test_delay_probe_model():
    launch = cm.probe_launch("probe_delay_ns", 132)
    assert (launch.grid, launch.block) == ((1, 1, 1), (32, 1, 1))
    assert cm.probe_out_words(launch) == 2  # one unsigned long long
    assert cm.delay_probe_ns(40e-6) == 40_000 and cm.delay_probe_ns(0) == 0
    assert cm.delay_probe_ns(1.5e-9) == 2
    assert cm.delay_probe_ns(5.0) == cm.DELAY_MAX_NS
    for bad in (-1e-6, float("nan"), float("inf"), "40us"):
        with pytest.raises(ValueError, match="delay_s"):
            cm.delay_probe_ns(bad)
    text = cm.source_path("probes.cu").read_text()
    assert "%%globaltimer" in text and f"MAX_DELAY_NS = {cm.DELAY_MAX_NS}ull" in text


# ------------------------------------------------------------------ launch geometry
def test_gemm_launch_geometry():
    launch = cm.gemm_launch(130, 136, 264, "fp16", "fp32")
    assert launch.entry == "gemm_mma_fp16_f32"
    assert launch.grid == (2, 2, 1) and launch.block == (256, 1, 1)
    assert launch.static_smem_bytes == 49_152 <= cm.STATIC_SMEM_LIMIT_BYTES
    assert launch.dynamic_smem_bytes == 0
    assert cm.gemm_launch(1, 1, 8, "bf16").grid == (1, 1, 1)
    assert cm.GEMM_WM * cm.GEMM_WARPS_M == cm.GEMM_BM and cm.GEMM_MT * 16 == cm.GEMM_WM
    with pytest.raises(ValueError, match="out_dtype"):
        cm.gemm_entry("bf16", "fp16")


# ------------------------------------------------------------------ sources and constants
def test_source_path_finds_every_source():
    for name in cm.SOURCES:
        assert cm.source_path(name).is_file()
        assert cm.source_path(name[:-3]) == cm.source_path(name)
    with pytest.raises(FileNotFoundError, match="valid"):
        cm.source_path("nope.cu")


def _constexprs(source: str) -> dict[str, int]:
    text = cm.source_path(source).read_text()
    return {k: int(v) for k, v in re.findall(r"constexpr int (\w+) = (\d+);", text)}


def test_python_constants_match_cuda_sources():
    gemm = _constexprs("gemm_mma.cu")
    assert (
        gemm["BM"],
        gemm["BN"],
        gemm["BK"],
        gemm["STAGES"],
        gemm["WARPS_M"],
        gemm["WARPS_N"],
    ) == (cm.GEMM_BM, cm.GEMM_BN, cm.GEMM_BK, cm.GEMM_STAGES, cm.GEMM_WARPS_M, cm.GEMM_WARPS_N)
    gemv = _constexprs("gemv.cu")
    assert (gemv["WARPS_PER_BLOCK"], gemv["VEC"], gemv["UNROLL"]) == (
        cm.GEMV_WARPS_PER_BLOCK,
        cm.GEMV_VEC,
        cm.GEMV_UNROLL,
    )
    probes = _constexprs("probes.cu")
    assert (
        probes["THREADS"],
        probes["NACC"],
        probes["UNROLL"],
        probes["MMA_NACC"],
        probes["SMEM_VECS"],
        probes["SMEM_READS"],
    ) == (
        cm.PROBE_THREADS,
        cm.PROBE_FMA_NACC,
        cm.PROBE_FMA_UNROLL,
        cm.PROBE_MMA_NACC,
        cm.PROBE_SMEM_VECS,
        cm.PROBE_SMEM_READS,
    )


def test_model_index_expressions_appear_in_gemm_source():
    """The numpy model and the kernel must use the same lane addressing and swizzle."""
    text = cm.source_path("gemm_mma.cu").read_text()
    for expr in [
        "chunk ^ ((row >> 1) & 3)",  # gemm_swizzle
        "warp_m * WM + mt * 16 + (lane & 15)",  # A ldmatrix row
        "kk * 2 + (lane >> 4)",  # A ldmatrix chunk
        "warp_n * WN + np * 16 + (lane & 7) + ((lane >> 4) << 3)",  # B ldmatrix row
        "kk * 2 + ((lane >> 3) & 1)",  # B ldmatrix chunk
        "const int row = id / CHUNKS;",  # cp.async thread -> row
        "const int c = id % CHUNKS;",
        "if (next < k_tiles) load_tile(next % STAGES, next);",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "cp.async.cg.shared.global",
    ]:
        assert expr in text, expr


def test_signatures_are_consistent():
    for name, (source, sig) in cm.ENTRY_SIGNATURES.items():
        assert source in cm.SOURCES
        assert (
            name in cm.source_path(source).read_text() or "##" in cm.source_path(source).read_text()
        )
        for c_type, _ in sig:
            assert cm.c_type_size(c_type) in (4, 8)
    assert len(cm.entries("gemv.cu")) == 2 * (2 * len(cm.GEMV_M_TILES) + 1)
    assert len(cm.entries("gemm_mma.cu")) == 4
    assert len(cm.entries("probes.cu")) == 16
    assert cm.ENTRY_SIGNATURES["probe_read_l1_u4"] == cm.ENTRY_SIGNATURES["probe_read_u4"]
    assert set(cm.READ_PROBE_ENTRIES.values()) <= set(cm.entries("probes.cu"))
    assert [cm.c_type_size(t) for t, _ in cm.ENTRY_SIGNATURES["probe_delay_ns"][1]] == [8, 8]
