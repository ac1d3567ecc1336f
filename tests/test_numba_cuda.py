"""Numba-CUDA kernels (kernels/numba_cuda.py) under the numba-cuda simulator, plus PTX checks.

Every kernel runs on tiny shapes (the simulator runs one Python thread per CUDA thread) against
its numpy reference, on fresh random inputs (never zeros) with the output poisoned (NaN) first,
including ragged edges; the probes are checked for their exact result. The FLOP/byte models and
the launch geometry are checked against hand-computed values. A subprocess without the simulator
compiles every kernel to PTX for sm_80 and sm_90 and checks the instructions that matter (skipped
when NVVM is unavailable); ptxas, when present, checks registers and spills.

Tolerances: fp32 products |out - ref| <= K * 2**-22 + 2**-23 |ref| (fp32 accumulation of K
terms of magnitude <= 1 against a float64 reference); fp16-output products add one fp16
rounding: K * 2**-22 + 2**-14 + 2**-10 |ref|. Probes are exact (integer or 1/8-multiple data).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import traceback
import zlib
from pathlib import Path

import numpy as np
import pytest
from numba import cuda  # module level: the simulator swaps the global `cuda` of kernels
from numba.cuda.types import float32
from roofprof.kernels import numba_cuda as nk

REPO = Path(__file__).resolve().parents[1]
SIM_SM_COUNT = 1  # the SM count handed to launch() in the simulator (keeps grids tiny)


@pytest.fixture(autouse=True, scope="module")
def _fast_thread_switching():
    """The simulator's barriers wake one Python thread at a time; a short GIL switch interval
    makes them several times faster (restored afterwards)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(5e-4)
    yield
    sys.setswitchinterval(old)


@pytest.fixture(autouse=True, scope="module")
def _poison_simulator_memory():
    """Fill new shared and local float arrays with NaN (the simulator hands out np.empty), so
    a kernel that reads memory it never wrote fails instead of passing on leftover values.

    The shared-array replacement keeps the simulator's rule (one buffer per source line of the
    ``cuda.shared.array`` call, shared by the block); it uses simulator internals, so it steps
    aside if they change.
    """
    if not nk.simulator_active():  # on a real GPU (gpu-marked runs) there is nothing to patch
        yield
        return
    from numba.cuda.simulator import kernelapi

    shared_cls, local_cls = kernelapi.FakeCUDAShared, kernelapi.FakeCUDALocal

    def _np_dtype(dtype):
        if isinstance(dtype, kernelapi.types.Type):
            return kernelapi.numpy_support.as_dtype(dtype)
        return np.dtype(dtype)

    def _fresh(shape, dtype):
        arr = np.empty(shape, _np_dtype(dtype))
        if np.issubdtype(arr.dtype, np.floating):
            arr.fill(np.nan)
        return arr

    orig_shared = shared_cls.array

    def shared_array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None or not hasattr(self, "_allocations"):
            return orig_shared(self, shape, dtype, alignment)
        caller = traceback.extract_stack(sys._getframe())[-2][0:2]
        res = self._allocations.get(caller)
        if res is None:
            res = self._allocations.setdefault(caller, _fresh(shape, dtype))
        return res

    def local_array(self, shape, dtype, alignment=None):
        return _fresh(shape, dtype)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shared_cls, "array", shared_array)
        mp.setattr(local_cls, "array", local_array)
        yield


@pytest.fixture
def rng(request):
    # fresh inputs per test, reproducible per test id
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def _assert_close(out, expected, rtol, atol, what):
    out64 = np.asarray(out, dtype=np.float64)
    assert out64.shape == np.shape(expected), what
    assert np.all(np.isfinite(out64)), f"{what}: unwritten (NaN) or non-finite outputs"
    err = np.abs(out64 - expected)
    bound = atol + rtol * np.abs(expected)
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else ()
    assert np.all(err <= bound), (
        f"{what}: max error {err.max():.3g} at {worst} (bound {bound[worst]:.3g})"
    )


def _check_inputs_nonzero(inputs):
    for name, val in inputs.items():
        if isinstance(val, np.ndarray):
            assert np.all(val != 0), f"input {name} contains zeros"


def run_spec(
    spec,
    shape,
    rng,
    *,
    sm_count=SIM_SM_COUNT,
    kernel=None,
    launch=None,
    inputs=None,
    out_dtype=None,
    tol=None,
):
    """Run one registry kernel the way the host will, and check it against its reference."""
    inputs = spec.make_inputs(shape, rng) if inputs is None else inputs
    _check_inputs_nonzero(inputs)
    dtype = spec.out_np_dtype if out_dtype is None else np.dtype(out_dtype)
    if spec.accumulates:
        start = float(rng.integers(1, 100))
        out = np.full(spec.out_shape(shape), start, dtype)
    else:
        start = 0.0
        out = np.full(spec.out_shape(shape), np.nan, dtype)
    grid, block = spec.launch(shape, sm_count) if launch is None else launch
    kern = spec.kernel_for(shape, sm_count) if kernel is None else kernel
    kern[grid, block](*spec.call_args(inputs, out))
    expected = np.asarray(spec.reference(inputs, shape), dtype=np.float64) + start
    rtol, atol = spec.tolerance(shape) if tol is None else tol
    _assert_close(out, expected, rtol, atol, f"{spec.name} {dict(shape)} grid={grid} block={block}")
    return out, inputs


SIM_ONLY = pytest.mark.skipif(not nk.simulator_active(), reason="simulator-only check")


@SIM_ONLY
def test_simulator_is_active_and_has_shuffles():
    assert nk.simulator_active()
    from numba.cuda.simulator import kernelapi

    assert hasattr(kernelapi.FakeCUDAModule, "shfl_down_sync")


@SIM_ONLY
def test_simulator_memory_is_poisoned():
    @cuda.jit
    def peek(out):
        sh = cuda.shared.array(4, float32)
        loc = cuda.local.array(2, float32)
        if cuda.threadIdx.x == 0:
            sh[0] = float32(1.0)
        cuda.syncthreads()
        out[cuda.threadIdx.x, 0] = sh[0]  # written by thread 0: shared by the block
        out[cuda.threadIdx.x, 1] = sh[1]  # never written
        out[cuda.threadIdx.x, 2] = loc[0]  # never written

    out = np.zeros((3, 3), np.float32)
    peek[1, 3](out)
    assert np.all(out[:, 0] == 1.0) and np.all(np.isnan(out[:, 1:]))


# ------------------------------------------------------------------------------------------
# GEMV
# ------------------------------------------------------------------------------------------

# Ragged shapes: M in {1,2,3} (rows per block 1..3), N in {1,7,33}, K in {1,31,65} (partial
# warps, tail loop only) and K = 600 (main loop with GEMV_UNROLL loads in flight, then the tail).
GEMV_FP32_SHAPES = [(1, 1, 1), (3, 7, 31), (1, 33, 65), (3, 1, 600), (1, 7, 600), (2, 5, 65)]
GEMV_FP16_SHAPES = [(1, 7, 65), (3, 33, 600), (1, 1, 31), (2, 3, 1)]


@pytest.mark.parametrize("m,n,k", GEMV_FP32_SHAPES)
def test_gemv_fp32(m, n, k, rng):
    run_spec(nk.KERNELS["gemv_fp32"], {"M": m, "N": n, "K": k}, rng)


@pytest.mark.parametrize("m,n,k", GEMV_FP16_SHAPES)
def test_gemv_fp16(m, n, k, rng):
    out, _ = run_spec(nk.KERNELS["gemv_fp16"], {"M": m, "N": n, "K": k}, rng)
    assert out.dtype == np.float16


def test_gemv_more_rows_than_a_block(rng):
    # M = 5: rows=4 per block, grid.y = 2; the second chunk clamps rows 5..7 and skips them.
    shape = {"M": 5, "N": 3, "K": 100}
    spec = nk.KERNELS["gemv_fp32"]
    assert nk.gemv_plan(5, 3, 100, SIM_SM_COUNT)[0] == 4
    assert spec.launch(shape, SIM_SM_COUNT)[0][1] == 2
    run_spec(spec, shape, rng)


def test_gemv_eight_warps_idle_and_partial(rng):
    # 8 warps per column: K = 2100 runs the unrolled loop (k + 7*256 < K) for some lanes, the
    # tail for others, and leaves lanes with nothing to do; cross-warp sum of 8 partials.
    spec = nk.KERNELS["gemv_fp32"]
    shape = {"M": 3, "N": 2, "K": 2100}
    run_spec(spec, shape, rng, kernel=nk.gemv_kernel(3, 8), launch=((2, 1, 1), (256, 1, 1)))


def test_gemv_fp16_inputs_fp32_output(rng):
    spec = nk.KERNELS["gemv_fp16"]
    shape = {"M": 2, "N": 5, "K": 70}
    out, _ = run_spec(spec, shape, rng, out_dtype=np.float32, tol=(2.0**-22, 70 * 2.0**-22))
    assert out.dtype == np.float32


def test_gemv_rejects_bad_configuration():
    with pytest.raises(ValueError, match="rows"):
        nk.make_gemv(rows=5)
    with pytest.raises(ValueError, match="warps"):
        nk.make_gemv(rows=1, warps=9)
    with pytest.raises(ValueError, match="M"):
        nk.gemv_launch(0, 4, 4, 1)
    with pytest.raises(ValueError, match="too large"):
        nk.gemv_launch(4 * 65536, 4, 4, 1)


# ------------------------------------------------------------------------------------------
# Tiled GEMM
# ------------------------------------------------------------------------------------------

# Test tiling: 8x8 threads x 2x2 outputs = 16x16 block tiles, bk = 16, so 17 and 32 force
# partial and whole tiles (and both load paths: interior and bounds-checked).
SIM_GEMM = nk.GemmConfig(tile=8, reg=2, bk=16, pad=4)
SIM_GEMM_KERNEL = nk.make_gemm_tiled(SIM_GEMM)
GEMM_SIZES = (1, 17, 32)
GEMM_FP32_SHAPES = [(m, n, k) for m in GEMM_SIZES for n in GEMM_SIZES for k in GEMM_SIZES]
# fp16: a covering set (every pair of sizes appears for every pair of dimensions)
GEMM_FP16_SHAPES = [
    (1, 1, 1),
    (1, 17, 32),
    (1, 32, 17),
    (17, 1, 32),
    (17, 17, 17),
    (17, 32, 1),
    (32, 1, 17),
    (32, 17, 1),
    (32, 32, 32),
]


@pytest.mark.parametrize("m,n,k", GEMM_FP32_SHAPES)
def test_gemm_fp32_small_tiles(m, n, k, rng):
    run_spec(
        nk.KERNELS["gemm_tiled_fp32"],
        {"M": m, "N": n, "K": k},
        rng,
        kernel=SIM_GEMM_KERNEL,
        launch=nk.gemm_launch(m, n, k, SIM_GEMM),
    )


@pytest.mark.parametrize("m,n,k", GEMM_FP16_SHAPES)
def test_gemm_fp16_small_tiles(m, n, k, rng):
    out, _ = run_spec(
        nk.KERNELS["gemm_tiled_fp16"],
        {"M": m, "N": n, "K": k},
        rng,
        kernel=SIM_GEMM_KERNEL,
        launch=nk.gemm_launch(m, n, k, SIM_GEMM),
    )
    assert out.dtype == np.float16


@pytest.mark.parametrize(
    "name,m,n,k",
    [
        ("gemm_tiled_fp32", 17, 33, 9),  # ragged everywhere, bounds-checked loads
        ("gemm_tiled_fp16", 17, 33, 9),
        ("gemm_tiled_fp32", 128, 128, 16),  # one whole 128x128 tile: the interior load path
    ],
)
def test_gemm_production_tiling(name, m, n, k, rng):
    spec = nk.KERNELS[name]
    assert spec.launch({"M": m, "N": n, "K": k}, 132)[1] == (16, 16, 1)
    run_spec(spec, {"M": m, "N": n, "K": k}, rng)


def test_gemm_config_checks():
    cfg = nk.GEMM_CONFIG
    assert (cfg.tile, cfg.reg, cfg.block_m, cfg.threads) == (16, 8, 128, 256)
    assert cfg.shared_bytes == 2 * 8 * 132 * 4  # 8448 bytes: many blocks fit per SM
    with pytest.raises(ValueError):
        nk.make_gemm_tiled(nk.GemmConfig(tile=64, reg=1, bk=8))  # 4096 threads
    with pytest.raises(ValueError):
        nk.make_gemm_tiled(nk.GemmConfig(tile=16, reg=1, bk=3))  # 256 threads, 48 loads


# ------------------------------------------------------------------------------------------
# Probes
# ------------------------------------------------------------------------------------------

# (grid, block) small enough for the simulator but with a stride that runs the ILP loop
SMALL_STREAM_LAUNCH = ((2, 1, 1), (64, 1, 1))


@pytest.mark.parametrize(
    "n,launch",
    [
        (1, None),
        (5000, None),
        (5000, SMALL_STREAM_LAUNCH),
        (1023, SMALL_STREAM_LAUNCH),
    ],
)
def test_read_sum_is_exact(n, launch, rng):
    out, inputs = run_spec(nk.KERNELS["read_fp32"], {"n": n}, rng, launch=launch)
    assert out.shape == (1,)


@pytest.mark.parametrize("n,launch", [(1, None), (5000, None), (3001, SMALL_STREAM_LAUNCH)])
def test_copy_is_exact(n, launch, rng):
    run_spec(nk.KERNELS["copy_fp32"], {"n": n}, rng, launch=launch)


@pytest.mark.parametrize("k", [0, 1, 11, 16])
def test_intensity_sweep_closed_form(k, rng):
    # k = 11 runs one unrolled trip of 8 plus 3; k = 16 two trips; k = 0 copies
    spec = nk.KERNELS["intensity_sweep_fp32"]
    out, inputs = run_spec(spec, {"n": 2000, "k": k}, rng, launch=SMALL_STREAM_LAUNCH)
    np.testing.assert_array_equal(out, inputs["x"] + np.float32(k * inputs["b"]))


def test_intensity_sweep_contracting(rng):
    # a != 1: compare with the float64 closed form at fp32 rounding
    spec = nk.KERNELS["intensity_sweep_fp32"]
    shape = {"n": 777, "k": 13}
    inputs = {**spec.make_inputs(shape, rng), "a": np.float32(0.5), "b": np.float32(1.0)}
    run_spec(spec, shape, rng, inputs=inputs, launch=SMALL_STREAM_LAUNCH, tol=(1e-6, 0.0))


@pytest.mark.parametrize("dt", ["fp32", "fp64"])
@pytest.mark.parametrize("iters", [0, 1, 3])
def test_fma_chain_closed_form(dt, iters, rng):
    # 300 threads: the second block's last 212 threads return at once
    run_spec(nk.KERNELS[f"fma_chain_{dt}"], {"threads": 300, "iters": iters}, rng)


@pytest.mark.parametrize("dt", ["fp32", "fp64"])
def test_fma_chain_contracting_and_conditional_store(dt, rng):
    spec = nk.KERNELS[f"fma_chain_{dt}"]
    shape = {"threads": 70, "iters": 2}
    np_t = np.float32 if dt == "fp32" else np.float64
    inputs = {**spec.make_inputs(shape, rng), "a": np_t(0.75), "b": np_t(0.25)}
    run_spec(spec, shape, rng, inputs=inputs, tol=(1e-5 if dt == "fp32" else 1e-12, 0.0))
    # store == 0: the same work, no store (the NaN poison survives)
    out = np.full(70, np.nan, np_t)
    grid, block = spec.launch(shape, SIM_SM_COUNT)
    spec.kernel[grid, block](*spec.call_args({**inputs, "store": np.int64(0)}, out))
    assert np.all(np.isnan(out))


def test_closed_forms():
    assert nk.fma_chain_closed_form(1.0, 1.0, 0.5, 4) == 3.0
    x = 0.3
    for _ in range(5):
        x = 0.5 * x + 2.0
    assert nk.fma_chain_closed_form(0.3, 0.5, 2.0, 5) == pytest.approx(x, rel=1e-15)
    steps = nk.FMA_INNER
    np.testing.assert_array_equal(
        nk.fma_chain_reference(2, 1, 1.0, 0.5), [28 + 8 * steps * 0.5, 36 + 8 * steps * 0.5]
    )


# ------------------------------------------------------------------------------------------
# FLOP / byte models and launch geometry
# ------------------------------------------------------------------------------------------


def test_flop_and_byte_models_hand_computed():
    k = nk.KERNELS
    decode = {"M": 1, "N": 4096, "K": 4096}
    assert k["gemv_fp16"].flops(decode) == 2 * 4096 * 4096 == 33_554_432
    assert k["gemv_fp16"].bytes(decode) == (4096 + 4096 * 4096 + 4096) * 2 == 33_570_816
    assert k["gemv_fp32"].bytes(decode) == 67_141_632
    sq = {"M": 64, "N": 64, "K": 64}
    assert k["gemm_tiled_fp32"].flops(sq) == 524_288
    assert k["gemm_tiled_fp32"].bytes(sq) == 3 * 64 * 64 * 4 == 49_152
    rect = {"M": 3, "N": 5, "K": 7}
    assert k["gemm_tiled_fp16"].flops(rect) == 210
    assert k["gemm_tiled_fp16"].bytes(rect) == (21 + 35 + 15) * 2 == 142
    assert k["read_fp32"].bytes({"n": 1000}) == 4004
    assert k["read_fp32"].flops({"n": 1000}) == 1000
    assert k["copy_fp32"].bytes({"n": 1000}) == 8000
    assert k["copy_fp32"].flops({"n": 1000}) == 0
    assert k["intensity_sweep_fp32"].flops({"n": 1000, "k": 3}) == 6000
    assert k["intensity_sweep_fp32"].bytes({"n": 1000, "k": 3}) == 8000
    assert k["intensity_sweep_fp32"].flops({"n": 1000, "k": 0}) == 0
    fma = {"threads": 1000, "iters": 10}
    assert nk.FMA_PER_ITER == 256
    assert k["fma_chain_fp32"].flops(fma) == 2 * 256 * 10 * 1000 == 5_120_000
    assert k["fma_chain_fp64"].flops(fma) == 5_120_000
    assert k["fma_chain_fp32"].bytes(fma) == 4000
    assert k["fma_chain_fp64"].bytes(fma) == 8000


@pytest.mark.parametrize("bad", [{}, {"M": 1, "N": 2}, {"M": 0, "N": 1, "K": 1}])
def test_models_reject_bad_shapes(bad):
    with pytest.raises(ValueError):
        nk.KERNELS["gemm_tiled_fp32"].flops(bad)
    with pytest.raises(ValueError):
        nk.KERNELS["intensity_sweep_fp32"].bytes({"n": 4})  # no k


def _threads(launch):
    (gx, gy, gz), (bx, by, bz) = launch
    return gx * gy * gz, bx * by * bz


@pytest.mark.parametrize("sm", [1, 46, 108, 132])
def test_launch_geometry_sanity(sm):
    shapes = {
        "gemv": [
            {"M": m, "N": n, "K": k}
            for m in (1, 3, 8, 17)
            for n in (1, 7, 4096, 11008)
            for k in (1, 65, 4096)
        ],
        "gemm": [{"M": m, "N": n, "K": 64} for m in (1, 127, 128, 4096) for n in (1, 129, 4096)],
        "read": [{"n": n} for n in (1, 1000, 1 << 20, 1 << 30)],
        "copy": [{"n": n} for n in (1, 1000, 1 << 20, 1 << 30)],
        "sweep": [{"n": n, "k": 8} for n in (1, 1000, 1 << 26)],
        "fma": [{"threads": t, "iters": 4} for t in (1, 255, 256, 1000, nk.fma_threads(sm))],
    }
    for spec in nk.KERNELS.values():
        for shape in shapes[spec.op if spec.op != "probe" else spec.probe]:
            launch = spec.launch(shape, sm)
            blocks, threads = _threads(launch)
            assert all(isinstance(v, int) and v >= 1 for v in launch[0] + launch[1])
            assert threads <= 1024 and threads % 32 == 0, (spec.name, shape, launch)
            assert launch[0][1] <= 65535 and launch[0][2] <= 65535
            if spec.op == "gemv":
                rows, warps = nk.gemv_plan(shape["M"], shape["N"], shape["K"], sm)
                assert launch == ((shape["N"], -(-shape["M"] // rows), 1), (32 * warps, 1, 1))
            elif spec.op == "gemm":
                bm = nk.GEMM_CONFIG.block_m
                assert launch[0][0] * bm >= shape["N"] > (launch[0][0] - 1) * bm
                assert launch[0][1] * bm >= shape["M"] > (launch[0][1] - 1) * bm
            elif spec.probe == "fma":
                assert shape["threads"] <= blocks * threads < shape["threads"] + threads
            else:  # grid-stride: never more than one resident wave, never an idle block
                assert blocks <= sm * nk.STREAM_BLOCKS_PER_SM
                assert (blocks - 1) * threads * nk.STREAM_ILP < shape["n"] or blocks == 1


def test_gemv_plan_for_llama_shapes():
    # Llama-7B decode on a 132-SM GPU: enough warps per column to fill every SM.
    assert nk.gemv_plan(1, 4096, 4096, 132) == (1, 4)  # 4096 blocks of 128 threads
    assert nk.gemv_plan(1, 11008, 4096, 132) == (1, 2)
    assert nk.gemv_plan(1, 4096, 11008, 132) == (1, 4)
    assert nk.gemv_plan(4, 4096, 4096, 132) == (4, 4)
    assert nk.gemv_plan(16, 4096, 4096, 132) == (4, 4)
    assert nk.gemv_plan(1, 1024, 4096, 132) == (1, 8)
    assert nk.gemv_plan(1, 1024, 64, 132) == (1, 2)  # short K: two warps are plenty
    assert nk.gemv_launch(1, 4096, 4096, 132) == ((4096, 1, 1), (128, 1, 1))
    assert nk.gemm_launch(4096, 4096, 4096) == ((32, 32, 1), (16, 16, 1))
    assert nk.stream_launch(1 << 28, 132) == ((528, 1, 1), (256, 1, 1))
    assert nk.stream_launch(100, 132) == ((1, 1, 1), (256, 1, 1))
    assert nk.threads_launch(1000) == ((4, 1, 1), (256, 1, 1))


# ------------------------------------------------------------------------------------------
# Registry
# ------------------------------------------------------------------------------------------


def test_registry_is_complete_and_consistent(rng):
    names = set(nk.KERNELS)
    assert names == {
        "gemv_fp32",
        "gemv_fp16",
        "gemm_tiled_fp32",
        "gemm_tiled_fp16",
        "read_fp32",
        "copy_fp32",
        "fma_chain_fp32",
        "fma_chain_fp64",
        "intensity_sweep_fp32",
    }
    small = {"M": 2, "N": 3, "K": 5, "n": 10, "k": 2, "threads": 4, "iters": 1}
    for name, spec in nk.KERNELS.items():
        assert spec.name == name
        assert spec.op in {"gemv", "gemm", "probe"}
        assert (spec.op == "probe") == (spec.probe in {"read", "copy", "fma", "sweep"})
        assert {spec.in_dtype, spec.out_dtype, spec.acc_dtype} <= {"fp16", "fp32", "fp64"}
        assert "out" in spec.args and len(spec.signature) == len(spec.args)
        shape = {key: small[key] for key in spec.shape_keys}
        inputs = spec.make_inputs(shape, rng)
        assert set(inputs) == set(spec.args) - {"out"}
        _check_inputs_nonzero(inputs)
        assert spec.kernel_for(shape, 4) is not None
        assert isinstance(spec.flops(shape), int) and isinstance(spec.bytes(shape), int)
        with pytest.raises(KeyError, match="missing"):
            spec.call_args({}, None)


def test_module_has_no_host_imports():
    src = Path(nk.__file__).read_text()
    assert not re.search(r"^\s*(from|import)\s+roofprof", src, re.M)
    assert "cupy" not in src and "torch" not in src


# ------------------------------------------------------------------------------------------
# PTX (real compiler, no GPU needed): run outside the simulator in a subprocess
# ------------------------------------------------------------------------------------------

_PTX_SCRIPT = textwrap.dedent(
    r"""
    import json, re, sys
    from pathlib import Path
    out_dir = Path(sys.argv[1])
    try:
        from numba import cuda
        from numba.cuda.types import float16, float32
        from roofprof.kernels import numba_cuda as nk

        def probe(x):
            x[0] = 1.0

        cuda.compile_ptx(probe, (float32[::1],), cc=(8, 0))
    except Exception as exc:  # no NVVM / NVRTC here
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}))
        sys.exit(0)
    assert not nk.simulator_active()
    kernels = {name: (spec.kernel, spec.signature) for name, spec in nk.KERNELS.items()}
    h2 = float16[:, ::1]
    kernels["gemv_fp16_rows4_warps2"] = (nk.gemv_kernel(4, 2), (h2, h2, h2))
    patterns = {
        "fma_f32": r"\bfma\.rn\.f32\b",
        "fma_f64": r"\bfma\.rn\.f64\b",
        "ld_f32": r"\bld(\.global)?(\.nc)?\.f32\b",
        "ld_global": r"\bld\.global\.",
        "ld_16": r"\bld(\.global)?(\.nc)?\.(u16|b16|f16)\b",
        "st_16": r"\bst(\.global)?\.(u16|b16|f16)\b",
        "st_f32": r"\bst(\.global)?\.f32\b",
        "ld_shared": r"\bld\.shared\.f32\b",
        "st_shared": r"\bst\.shared\.(f32|u32|b32)\b",
        "bar": r"\bbar\.sync\b",
        "shfl_down": r"\bshfl\.sync\.down\.b32\b",
        "atom_add_f32": r"\b(atom|red)\.global\.add\.f32\b",
        "cvt_f16_to_f32": r"\bcvt\.f32\.f16\b",
        "local_memory": r"(\.local\s|__local_depot|\bld\.local\b|\bst\.local\b)",
    }
    result = {}
    for cc in ((8, 0), (9, 0)):
        for name, (kernel, sig) in kernels.items():
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
            (out_dir / f"{name}_sm{cc[0]}{cc[1]}.ptx").write_text(ptx)
            counts = {key: len(re.findall(p, ptx)) for key, p in patterns.items()}
            counts["target"] = re.search(r"\.target\s+(\w+)", ptx).group(1)
            result[f"{name}@sm{cc[0]}{cc[1]}"] = counts
    print(json.dumps({"ok": True, "result": result}))
    """
)


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    """PTX features of every kernel for sm_80 and sm_90, compiled without the simulator."""
    out_dir = tmp_path_factory.mktemp("ptx")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run(
        [sys.executable, "-c", _PTX_SCRIPT, str(out_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if not report["ok"]:
        pytest.skip(f"cuda.compile_ptx unavailable here: {report['error']}")
    return report["result"], out_dir


CCS = ("sm80", "sm90")


def test_ptx_targets_and_no_local_memory(ptx):
    result, _ = ptx
    assert len(result) == 2 * (len(nk.KERNELS) + 1)
    for key, counts in result.items():
        assert counts["target"] == key.split("@")[1].replace("sm", "sm_"), key
        # local arrays (accumulators, row indices, ILP buffers) all live in registers
        assert counts["local_memory"] == 0, key


@pytest.mark.parametrize("cc", CCS)
def test_ptx_gemv(ptx, cc):
    result, _ = ptx
    f32 = result[f"gemv_fp32@{cc}"]
    assert f32["ld_global"] > 0 and f32["ld_f32"] >= 2 * nk.GEMV_UNROLL
    assert f32["fma_f32"] >= nk.GEMV_UNROLL and f32["shfl_down"] >= 5 and f32["bar"] == 1
    for name in ("gemv_fp16", "gemv_fp16_rows4_warps2"):
        f16 = result[f"{name}@{cc}"]
        assert f16["ld_16"] >= 2 * nk.GEMV_UNROLL, "fp16 GEMV must load 16-bit elements"
        assert f16["ld_f32"] == 0 and f16["st_16"] >= 1 and f16["cvt_f16_to_f32"] > 0
        assert f16["fma_f32"] >= nk.GEMV_UNROLL  # fp32 accumulation
    assert result[f"gemv_fp16_rows4_warps2@{cc}"]["fma_f32"] >= 4 * nk.GEMV_UNROLL


@pytest.mark.parametrize("cc", CCS)
def test_ptx_gemm(ptx, cc):
    result, _ = ptx
    reg = nk.GEMM_CONFIG.reg
    for dt in ("fp32", "fp16"):
        c = result[f"gemm_tiled_{dt}@{cc}"]
        assert c["fma_f32"] >= reg * reg  # the register-blocked inner product
        assert c["ld_shared"] >= 2 * reg and c["st_shared"] > 0 and c["bar"] >= 2
        assert c["ld_global"] > 0
    assert result[f"gemm_tiled_fp16@{cc}"]["ld_16"] > 0
    assert result[f"gemm_tiled_fp16@{cc}"]["cvt_f16_to_f32"] > 0


@pytest.mark.parametrize("cc", CCS)
def test_ptx_probes(ptx, cc):
    result, _ = ptx
    read = result[f"read_fp32@{cc}"]
    assert read["ld_f32"] >= nk.STREAM_ILP and read["atom_add_f32"] == 1
    assert read["shfl_down"] >= 5
    copy = result[f"copy_fp32@{cc}"]
    assert copy["ld_f32"] >= nk.STREAM_ILP and copy["st_f32"] >= nk.STREAM_ILP
    assert result[f"fma_chain_fp32@{cc}"]["fma_f32"] >= nk.FMA_PER_ITER
    assert result[f"fma_chain_fp64@{cc}"]["fma_f64"] >= nk.FMA_PER_ITER
    assert result[f"fma_chain_fp64@{cc}"]["fma_f32"] == 0
    sweep = result[f"intensity_sweep_fp32@{cc}"]
    assert sweep["fma_f32"] >= nk.STREAM_ILP * nk.SWEEP_UNROLL


def _ptxas() -> str | None:
    found = shutil.which("ptxas")
    if found:
        return found
    try:
        import nvidia.cuda_nvcc as nvcc_pkg

        cand = Path(list(nvcc_pkg.__path__)[0]) / "bin" / "ptxas"
        return str(cand) if cand.exists() else None
    except ImportError:
        return None


def test_ptxas_registers_and_spills(ptx):
    """GEMM: <= 128 registers (two 256-thread blocks per SM) and no spills; others no spills."""
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("ptxas not found (nvidia-cuda-nvcc wheel or CUDA toolkit)")
    _, out_dir = ptx
    for name in ("gemm_tiled_fp32", "gemm_tiled_fp16", "gemv_fp16", "read_fp32", "fma_chain_fp32"):
        src = out_dir / f"{name}_sm90.ptx"
        proc = subprocess.run(
            [ptxas, "-arch=sm_90", "-v", str(src), "-o", os.devnull],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0 and "Unsupported" in proc.stderr:
            pytest.skip(f"ptxas cannot assemble this PTX version: {proc.stderr[-300:]}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        info = proc.stderr + proc.stdout
        regs = int(re.search(r"Used (\d+) registers", info).group(1))
        assert "0 bytes spill stores" in info and "0 bytes spill loads" in info, (name, info)
        if name.startswith("gemm"):
            assert regs <= 128, (name, regs)


# ------------------------------------------------------------------------------------------
# Real GPU (skipped without one; `roofprof selftest` runs these)
# ------------------------------------------------------------------------------------------

GPU_SHAPES = {
    "gemv_fp32": [{"M": 1, "N": 4096, "K": 4096}, {"M": 3, "N": 1000, "K": 4099}],
    "gemv_fp16": [
        {"M": 1, "N": 4096, "K": 4096},
        {"M": 4, "N": 11008, "K": 4096},
        {"M": 7, "N": 129, "K": 1000},
    ],
    "gemm_tiled_fp32": [{"M": 512, "N": 512, "K": 512}, {"M": 257, "N": 129, "K": 77}],
    "gemm_tiled_fp16": [{"M": 512, "N": 4096, "K": 256}, {"M": 33, "N": 200, "K": 1001}],
    "read_fp32": [{"n": 1 << 20}, {"n": (1 << 22) + 3}],
    "copy_fp32": [{"n": (1 << 22) + 5}],
    "intensity_sweep_fp32": [{"n": (1 << 20) + 7, "k": 37}],
    "fma_chain_fp32": [{"threads": 100_003, "iters": 20}],
    "fma_chain_fp64": [{"threads": 100_003, "iters": 20}],
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_SHAPES))
def test_registry_kernels_on_a_real_gpu(name, rng):
    """Every registry kernel at realistic sizes, with the real SM count, against its reference."""
    assert not nk.simulator_active()
    sm_count = cuda.get_current_device().MULTIPROCESSOR_COUNT
    for shape in GPU_SHAPES[name]:
        run_spec(nk.KERNELS[name], shape, rng, sm_count=sm_count)
