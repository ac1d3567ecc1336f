"""Numba-CUDA device code: GEMV, tiled GEMM and roofline probe kernels.

Device code only: ``numba.cuda.jit`` kernels, their numpy references, exact FLOP/byte models
and launch geometry. Nothing here allocates device memory, times anything or imports roofprof
host modules; ``roofprof.devices`` drives these kernels through :data:`KERNELS`.

The code lives in one module per concept, re-exported here under the names the host uses:
:mod:`.numba_support` (types, checks, the simulator's shuffle), :mod:`.numba_matmul` (GEMV,
tiled GEMM), :mod:`.numba_probes` (read, copy, FMA chains, intensity sweep) and
:mod:`.numba_registry` (:data:`KERNELS`).

Conventions (all kernels)
-------------------------
* Matrices are C-contiguous. ``W``/``B`` is an ``nn.Linear`` weight, row-major ``[N, K]``, so
  every product here is ``out[M, N] = in[M, K] . W[N, K]^T`` with both operands K-contiguous.
* fp16 kernels read fp16, convert each element to fp32 once and accumulate in fp32
  (``cuda.fma``); the result is rounded once, on the store, to the output array's dtype. The
  registry entries use fp16 outputs (what an fp16 ``nn.Linear`` returns); the same kernels accept
  an fp32 output array unchanged.
* Shapes are dicts: ``{"M", "N", "K"}`` for GEMV/GEMM, ``{"n"}`` for read/copy,
  ``{"n", "k"}`` for the intensity sweep, ``{"threads", "iters"}`` for the FMA chains.
* Bytes are the compulsory traffic: every input element read once, every output element
  written once (re-reads served by caches are not counted).
* FLOPs count one FMA as 2 and include only the work the op defines (2MNK for a product,
  2k per element for the sweep, the chains' FMAs); reduction bookkeeping (cross-warp adds,
  combining a thread's accumulators) is left out and named in each model.
* Launch geometry depends only on the shape and the SM count. Every probe and the GEMM are
  correct for any grid (grid-stride or bounds-checked); the GEMV needs exactly the block size
  it was compiled for, so launch ``spec.kernel_for(shape, sm)`` with ``spec.launch(shape, sm)``.

Warp shuffles in the simulator
------------------------------
numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``) has no ``cuda.shfl_down_sync``. When the
simulator is active, importing this module adds one to the simulator's fake ``cuda`` module
(only if it is missing), built on a per-warp barrier. It needs every lane of a warp to reach
each shuffle, which all kernels here guarantee: no thread returns before a shuffle.

Example
-------
>>> import numpy as np
>>> from roofprof.kernels import numba_cuda as nk
>>> spec = nk.KERNELS["gemv_fp32"]
>>> shape = {"M": 1, "N": 4096, "K": 4096}
>>> spec.flops(shape), spec.bytes(shape)
(33554432, 67141632)
>>> spec.launch(shape, 132)
((4096, 1, 1), (128, 1, 1))
"""

from __future__ import annotations

from .numba_matmul import (
    GEMM_BK,
    GEMM_CONFIG,
    GEMM_PAD,
    GEMM_REG,
    GEMM_TILE,
    GEMV_MAX_ROWS,
    GEMV_MAX_WARPS,
    GEMV_UNROLL,
    GemmConfig,
    gemm_launch,
    gemm_tiled_fp16,
    gemm_tiled_fp32,
    gemv_kernel,
    gemv_launch,
    gemv_plan,
    make_gemm_tiled,
    make_gemv,
    matmul_nt_reference,
)
from .numba_probes import (
    FMA_ACC,
    FMA_BLOCK,
    FMA_INNER,
    FMA_PER_ITER,
    STREAM_BLOCK,
    STREAM_BLOCKS_PER_SM,
    STREAM_ILP,
    SWEEP_UNROLL,
    copy_fp32,
    fma_chain_closed_form,
    fma_chain_fp32,
    fma_chain_fp64,
    fma_chain_reference,
    fma_threads,
    intensity_sweep_fp32,
    read_fp32,
    stream_launch,
    threads_launch,
)
from .numba_registry import KERNELS, KernelSpec
from .numba_support import FULL_MASK, WARP_SIZE, Launch, Shape, simulator_active

__all__ = [
    "FMA_ACC",
    "FMA_BLOCK",
    "FMA_INNER",
    "FMA_PER_ITER",
    "FULL_MASK",
    "GEMM_BK",
    "GEMM_CONFIG",
    "GEMM_PAD",
    "GEMM_REG",
    "GEMM_TILE",
    "GEMV_MAX_ROWS",
    "GEMV_MAX_WARPS",
    "GEMV_UNROLL",
    "GemmConfig",
    "KERNELS",
    "KernelSpec",
    "Launch",
    "STREAM_BLOCK",
    "STREAM_BLOCKS_PER_SM",
    "STREAM_ILP",
    "SWEEP_UNROLL",
    "Shape",
    "WARP_SIZE",
    "copy_fp32",
    "fma_chain_closed_form",
    "fma_chain_fp32",
    "fma_chain_fp64",
    "fma_chain_reference",
    "fma_threads",
    "gemm_launch",
    "gemm_tiled_fp16",
    "gemm_tiled_fp32",
    "gemv_kernel",
    "gemv_launch",
    "gemv_plan",
    "intensity_sweep_fp32",
    "make_gemm_tiled",
    "make_gemv",
    "matmul_nt_reference",
    "read_fp32",
    "simulator_active",
    "stream_launch",
    "threads_launch",
]
