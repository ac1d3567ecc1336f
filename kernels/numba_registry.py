"""The registry of the Numba-CUDA kernels: :data:`KERNELS`, one :class:`KernelSpec` each.

A spec holds what the host needs to run, check and account a kernel: inputs, reference,
tolerance, FLOP and byte models, launch geometry, the ``cuda.compile_ptx`` signature.
``roofprof.devices`` drives the kernels through it.

>>> KERNELS["gemv_fp32"].flops({"M": 1, "N": 4096, "K": 4096})
33554432
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .numba_matmul import (
    gemm_launch,
    gemm_tiled_fp16,
    gemm_tiled_fp32,
    gemv_kernel,
    gemv_launch,
    gemv_plan,
    matmul_nt_reference,
)
from .numba_probes import (
    FMA_INNER,
    FMA_PER_ITER,
    copy_fp32,
    fma_chain_closed_form,
    fma_chain_fp32,
    fma_chain_fp64,
    fma_chain_reference,
    intensity_sweep_fp32,
    read_fp32,
    stream_launch,
    threads_launch,
)
from .numba_support import Launch, Shape, float16, float32, float64, int64, positive_sizes

__all__ = ["KERNELS", "KernelSpec"]


_NP = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}
_SIZE = {"fp16": 2, "fp32": 4, "fp64": 8}
_EPS = {"fp16": 2.0**-11, "fp32": 2.0**-24, "fp64": 2.0**-53}


@dataclass(frozen=True)
class KernelSpec:
    """What the host needs to run, check and account one kernel.

    Fields:
      name, kernel (the ``cuda.jit`` dispatcher; for the GEMV the decode variant, the one
      the PTX tests compile: launch :meth:`kernel_for` instead), op ("gemv" | "gemm" | "probe"),
      probe ("" | "read" | "copy" | "fma" | "sweep"), in_dtype / out_dtype / acc_dtype
      (roofprof dtype strings), args (kernel argument names in call order; "out" is the output
      array), shape_keys, make_inputs(shape, rng) -> {arg: array or scalar} for every arg but
      "out" (fresh random, never zeros), out_shape(shape), reference(inputs, shape) -> float64
      expected output, accumulates (True: the kernel adds into "out", so expected =
      initial out + reference; False: it overwrites every element, so poison it with NaN),
      tolerance(shape) -> (rtol, atol) for ``|out - ref| <= atol + rtol * |ref|``,
      flops(shape), bytes(shape) (ints, FLOP and bytes), launch(shape, sm_count) ->
      (grid, block) 3-tuples, signature (numba argument types of ``kernel`` for
      ``cuda.compile_ptx``), select(shape, sm_count) -> kernel (None: always ``kernel``).

    Example::

        spec = KERNELS["gemm_tiled_fp16"]; shape = {"M": 64, "N": 64, "K": 64}
        inputs = spec.make_inputs(shape, np.random.default_rng(0))
        out = np.full(spec.out_shape(shape), np.nan, spec.out_np_dtype)
        grid, block = spec.launch(shape, sm_count)
        spec.kernel_for(shape, sm_count)[grid, block](*spec.call_args(inputs, out))
    """

    name: str
    kernel: Any
    op: str
    probe: str
    in_dtype: str
    out_dtype: str
    acc_dtype: str
    args: tuple[str, ...]
    shape_keys: tuple[str, ...]
    make_inputs: Callable[[Shape, np.random.Generator], dict[str, Any]]
    out_shape: Callable[[Shape], tuple[int, ...]]
    reference: Callable[[Mapping[str, Any], Shape], np.ndarray]
    accumulates: bool
    tolerance: Callable[[Shape], tuple[float, float]]
    flops: Callable[[Shape], int]
    bytes: Callable[[Shape], int]
    launch: Callable[[Shape, int], Launch]
    signature: tuple[Any, ...]
    select: Callable[[Shape, int], Any] | None = None

    def kernel_for(self, shape: Shape, sm_count: int) -> Any:
        """The kernel to launch for ``shape`` on a GPU with ``sm_count`` SMs.

        Always pair it with ``launch(shape, sm_count)``: the GEMV's block size is compiled in.
        Raises ValueError for an invalid shape. Example: ``spec.kernel_for(shape, 132)[g, b](...)``.
        """
        return self.kernel if self.select is None else self.select(shape, sm_count)

    @property
    def out_np_dtype(self) -> np.dtype:
        """numpy dtype of the output array."""
        return np.dtype(_NP[self.out_dtype])

    def call_args(self, inputs: Mapping[str, Any], out: Any) -> tuple[Any, ...]:
        """Kernel arguments in order: ``inputs`` by name plus ``out`` for the output array.

        Raises KeyError naming a missing argument. Example: ``kernel[g, b](*spec.call_args(i, o))``.
        """
        vals = {**inputs, "out": out}
        missing = [a for a in self.args if a not in vals]
        if missing:
            raise KeyError(f"{self.name}: missing kernel arguments {missing}")
        return tuple(vals[a] for a in self.args)


def _rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Uniform magnitudes in [0.25, 1] with random signs, cast to ``dtype``: never zero."""
    mag = rng.uniform(0.25, 1.0, size=shape)
    sign = rng.choice(np.array([-1.0, 1.0]), size=shape)
    return (mag * sign).astype(_NP[dtype])


def _matmul_spec(name, op, dt, kernel, launch, select=None):
    def make_inputs(shape, rng):
        m, n, k = positive_sizes(shape, "M", "N", "K")
        return {"x": _rand(rng, (m, k), dt), "w": _rand(rng, (n, k), dt)}

    def tolerance(shape):
        (k,) = positive_sizes(shape, "K")
        # fp32 accumulation over K terms of magnitude <= 1, plus one rounding to the output.
        return 2.0 * _EPS[dt], k * 4.0 * _EPS["fp32"] + (2.0**-14 if dt == "fp16" else 0.0)

    def bytes_(shape):
        m, n, k = positive_sizes(shape, "M", "N", "K")
        return (m * k + n * k) * _SIZE[dt] + m * n * _SIZE[dt]

    def flops(shape):
        # 2MNK; the GEMV's (warps - 1) cross-warp adds per output are not counted
        m, n, k = positive_sizes(shape, "M", "N", "K")
        return 2 * m * n * k

    arr_t = float16 if dt == "fp16" else float32
    return KernelSpec(
        name=name,
        kernel=kernel,
        op=op,
        probe="",
        in_dtype=dt,
        out_dtype=dt,
        acc_dtype="fp32",
        args=("x", "w", "out"),
        shape_keys=("M", "N", "K"),
        make_inputs=make_inputs,
        out_shape=lambda s: positive_sizes(s, "M", "N"),
        reference=lambda inp, s: matmul_nt_reference(inp["x"], inp["w"]),
        accumulates=False,
        tolerance=tolerance,
        flops=flops,
        bytes=bytes_,
        launch=lambda s, sm: launch(*positive_sizes(s, "M", "N", "K"), sm),
        signature=(arr_t[:, ::1], arr_t[:, ::1], arr_t[:, ::1]),
        select=select,
    )


_GEMV_DECODE = gemv_kernel(1, 4)


def _gemv_select(shape: Shape, sm_count: int):
    return gemv_kernel(*gemv_plan(*positive_sizes(shape, "M", "N", "K"), sm_count))


def _gemm_launch_sm(m: int, n: int, k: int, sm_count: int) -> Launch:
    return gemm_launch(m, n, k)


def _read_spec():
    def make_inputs(shape, rng):
        (n,) = positive_sizes(shape, "n")
        # Small integers: every partial sum is exact in fp32 while n * 8 < 2**24.
        return {"src": rng.integers(1, 9, size=n).astype(np.float32)}

    return KernelSpec(
        name="read_fp32",
        kernel=read_fp32,
        op="probe",
        probe="read",
        in_dtype="fp32",
        out_dtype="fp32",
        acc_dtype="fp32",
        args=("src", "out"),
        shape_keys=("n",),
        make_inputs=make_inputs,
        out_shape=lambda s: (1,),
        reference=lambda inp, s: np.array([np.sum(inp["src"], dtype=np.float64)]),
        accumulates=True,
        # exact while every partial sum is an integer below 2**24; beyond, fp32 rounding of
        # the per-warp atomic adds
        tolerance=lambda s: (
            (0.0, 0.0) if positive_sizes(s, "n")[0] * 8 < 2**24 else (2.0**-10, 0.0)
        ),
        # one add per element; the ~13 adds per thread that combine the partial sums are not
        # counted (grid-dependent, < 0.1% at probe sizes)
        flops=lambda s: positive_sizes(s, "n")[0],
        bytes=lambda s: positive_sizes(s, "n")[0] * 4 + 4,
        launch=lambda s, sm: stream_launch(positive_sizes(s, "n")[0], sm),
        signature=(float32[::1], float32[::1]),
    )


def _copy_spec():
    def make_inputs(shape, rng):
        (n,) = positive_sizes(shape, "n")
        return {"src": _rand(rng, (n,), "fp32")}

    return KernelSpec(
        name="copy_fp32",
        kernel=copy_fp32,
        op="probe",
        probe="copy",
        in_dtype="fp32",
        out_dtype="fp32",
        acc_dtype="fp32",
        args=("src", "out"),
        shape_keys=("n",),
        make_inputs=make_inputs,
        out_shape=lambda s: positive_sizes(s, "n"),
        reference=lambda inp, s: inp["src"].astype(np.float64),
        accumulates=False,
        tolerance=lambda s: (0.0, 0.0),
        flops=lambda s: 0,
        bytes=lambda s: 2 * 4 * positive_sizes(s, "n")[0],
        launch=lambda s, sm: stream_launch(positive_sizes(s, "n")[0], sm),
        signature=(float32[::1], float32[::1]),
    )


def _fma_spec(dt, kernel):
    np_t = _NP[dt]

    def _sizes(shape):
        return positive_sizes(shape, "threads", "iters", zero_ok=("iters",))

    def make_inputs(shape, rng):
        threads, iters = _sizes(shape)
        # a == 1 and b a multiple of 1/8: every chain value is exact (a closed form).
        return {
            "iters": np.int64(iters),
            "a": np_t(1.0),
            "b": np_t(rng.integers(1, 8) / 8.0),
            "store": np.int64(1),
        }

    def reference(inp, shape):
        threads, iters = _sizes(shape)
        return fma_chain_reference(threads, int(inp["iters"]), float(inp["a"]), float(inp["b"]))

    def tolerance(shape):
        threads, iters = _sizes(shape)
        # Multiples of 1/8 are exact below 2**(mantissa bits - 3); the stored sum of the 8
        # chains is at most 8 * (63 + 7 + steps * 7/8).
        exact_limit = 2.0 ** (21 if dt == "fp32" else 50)
        exact = 8 * (70 + iters * FMA_INNER) < exact_limit
        return (0.0, 0.0) if exact else (_EPS[dt] * 8, 0.0)

    arr_t = float32 if dt == "fp32" else float64
    return KernelSpec(
        name=f"fma_chain_{dt}",
        kernel=kernel,
        op="probe",
        probe="fma",
        in_dtype=dt,
        out_dtype=dt,
        acc_dtype=dt,
        args=("out", "iters", "a", "b", "store"),
        shape_keys=("threads", "iters"),
        make_inputs=make_inputs,
        out_shape=lambda s: positive_sizes(s, "threads"),
        reference=reference,
        accumulates=False,
        tolerance=tolerance,
        # the chains' FMAs; the 7 adds per thread that combine them are not counted
        flops=lambda s: 2 * FMA_PER_ITER * math.prod(_sizes(s)),
        # the per-thread result store (store != 0); 0 bytes when launched with store == 0
        bytes=lambda s: positive_sizes(s, "threads")[0] * _SIZE[dt],
        launch=lambda s, sm: threads_launch(positive_sizes(s, "threads")[0]),
        signature=(arr_t[::1], int64, arr_t, arr_t, int64),
    )


def _sweep_spec():
    def _nk(shape):
        return positive_sizes(shape, "n", "k", zero_ok=("k",))

    def make_inputs(shape, rng):
        n, k = _nk(shape)
        # x: small multiples of 1/8, a == 1, b a multiple of 1/8: y = x + k*b exactly.
        return {
            "x": (rng.integers(1, 64, size=n) / 8.0).astype(np.float32),
            "k": np.int64(k),
            "a": np.float32(1.0),
            "b": np.float32(rng.integers(1, 8) / 8.0),
        }

    def reference(inp, shape):
        return fma_chain_closed_form(inp["x"], float(inp["a"]), float(inp["b"]), int(inp["k"]))

    return KernelSpec(
        name="intensity_sweep_fp32",
        kernel=intensity_sweep_fp32,
        op="probe",
        probe="sweep",
        in_dtype="fp32",
        out_dtype="fp32",
        acc_dtype="fp32",
        args=("x", "out", "k", "a", "b"),
        shape_keys=("n", "k"),
        make_inputs=make_inputs,
        out_shape=lambda s: (_nk(s)[0],),
        reference=reference,
        accumulates=False,
        tolerance=lambda s: (0.0, 0.0) if _nk(s)[1] < 2**16 else (1e-6, 0.0),
        flops=lambda s: 2 * math.prod(_nk(s)),
        bytes=lambda s: 8 * _nk(s)[0],
        launch=lambda s, sm: stream_launch(_nk(s)[0], sm),
        signature=(float32[::1], float32[::1], int64, float32, float32),
    )


KERNELS: dict[str, KernelSpec] = {
    spec.name: spec
    for spec in (
        _matmul_spec("gemv_fp32", "gemv", "fp32", _GEMV_DECODE, gemv_launch, _gemv_select),
        _matmul_spec("gemv_fp16", "gemv", "fp16", _GEMV_DECODE, gemv_launch, _gemv_select),
        _matmul_spec("gemm_tiled_fp32", "gemm", "fp32", gemm_tiled_fp32, _gemm_launch_sm),
        _matmul_spec("gemm_tiled_fp16", "gemm", "fp16", gemm_tiled_fp16, _gemm_launch_sm),
        _read_spec(),
        _copy_spec(),
        _fma_spec("fp32", fma_chain_fp32),
        _fma_spec("fp64", fma_chain_fp64),
        _sweep_spec(),
    )
}
"""Every kernel of this module by name; see :class:`KernelSpec` for the fields."""
