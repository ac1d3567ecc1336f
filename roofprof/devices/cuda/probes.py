"""The GPU probe catalogue: ``kernels/cuda/probes.cu`` plus the vendor references, as
:class:`Probe` s.

Each entry has the shape of the CPU catalogue (``roofprof.devices.cpu``) so that
:func:`roofprof.roofline.probes.measure_roofline` runs it unchanged (probe: kind, level or dtype;
kernel; bytes or FLOPs per repetition):

* ``read``: bandwidth (sweep), level from the working set; ``probe_read_u4``
  (``ld.global.cg``: L2 only, never L1), a repetition = one more pass in the same launch;
  ``16·n_vec``.
* ``copy``: bandwidth (sweep), level from the working set; ``probe_copy_u4``; ``32·n_vec``
  (read + write).
* ``read-l2``: bandwidth, ``l2``; ``probe_read_u4`` (``ld.global.cg``: L1 bypassed) on L2/4;
  ``16·n_vec``.
* ``read-l1``: bandwidth, ``l1``; ``probe_read_l1_u4`` (L1-allocating) on 64 KiB per SM;
  ``16·n_vec``.
* ``smem``: bandwidth, ``smem``; ``probe_smem_u4``; ``iters·8·16`` per thread.
* ``d2d-copy``: bandwidth, ``dram``; ``cudaMemcpyAsync`` device to device (what CuPy's copy
  of a contiguous array does): the vendor reference of the HBM probes; ``2·size``.
* ``fma-fp64/fp32/fp16x2/bf16x2``: compute, fp64, fp32, fp16, bf16; ``probe_fma_*``;
  ``cuda_models.fma_probe_flops``.
* ``mma.sync-bf16/fp16/tf32/fp8/int8``: compute, same dtype; ``probe_mma_*`` (``mma.sync``:
  on Hopper below the ``wgmma`` datasheet peak); ``cuda_models.mma_probe_flops``.
* ``gemm-bf16/fp16/fp32/tf32``: gemm, same dtype; cuBLAS (``cupy.matmul``; bf16 and tf32 —
  ``CUBLAS_COMPUTE_32F_FAST_TF32`` — through ``cublasGemmEx``); ``2n³``.
* ``gemm-fp8-torch``: gemm, fp8; ``torch._scaled_mm`` (e4m3, per-tensor scales, bf16 out;
  sm_89+); ``2n³``.
* ``gemm-bf16-torch/fp16-torch``: gemm, same dtype; ``torch.matmul`` on CUDA (when torch has
  CUDA); ``2n³``.
* ``intensity-fp32``: intensity, fp32; ``probe_intensity_fp32`` (``nfma = max(1, k/2)``);
  ``2·nfma·4·n_vec`` FLOPs, ``16·n_vec`` bytes.

The set-ups are :mod:`roofprof.devices.cuda.probe_setups`, their checks
:mod:`roofprof.devices.cuda.probe_checks`; this module re-exports both.

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

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from roofprof.devices.base import Probe
from roofprof.devices.cuda._runtime import nvrtc_version
from roofprof.devices.cuda.impls import (
    CublasGemm,
    TorchGemm,
    gemm_probe_setup,
    torch_fp8_gemm_reason,
    torch_fp8_gemm_setup,
)
from roofprof.devices.cuda.probe_checks import (
    CHECK_SEED,
    NEVER,
    POISON,
    flag_check,
    fma_probe_fold,
    hash32,
    intensity_probe_folds,
    merge_checks,
    read_probe_folds,
    round_to_precision,
    smem_probe_fold,
)
from roofprof.devices.cuda.probe_setups import (
    FMA_SEED,
    ITERS_PER_REP,
    L1_PROBE_SM_FOOTPRINT_BYTES,
    MAX_ITERS_PER_LAUNCH,
    SMEM_ITERS_PER_REP,
    ProbeArena,
    launch_latency,
    read_check,
    setup_copy,
    setup_d2d,
    setup_fma,
    setup_intensity,
    setup_mma,
    setup_read,
    setup_smem,
    split_iters,
)
from roofprof.workload import Op

if TYPE_CHECKING:
    from roofprof.devices.cuda.device import CudaDevice

# The checks and the set-ups live in probe_checks and probe_setups; this face re-exports them.
__all__ = [
    "FMA_SEED",
    "ITERS_PER_REP",
    "L1_PROBE_SM_FOOTPRINT_BYTES",
    "MAX_ITERS_PER_LAUNCH",
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
    "split_iters",
]

#: mma.sync dtypes that are diagnostics, never ceilings, from this compute capability on: Hopper
#: and Blackwell run fp8 (emulated: F2FP + HMMA), tf32 and int8 mma.sync below their native
#: tensor path (wgmma/tcgen05), which only library GEMMs reach.
MMA_DIAGNOSTIC_DTYPES = ("fp8", "tf32", "int8")
MMA_DIAGNOSTIC_MIN_CC = (9, 0)


# --------------------------------------------------------------------------- catalogue


def skipped_probes(device: CudaDevice) -> list[dict[str, str]]:
    """Probes left out of the catalogue on this GPU, each with the reason."""
    return _catalogue(device)[1]


def cuda_probes(device: CudaDevice) -> tuple[Probe, ...]:
    """The probe catalogue of ``device`` (see the module docstring)."""
    return _catalogue(device)[0]


def _catalogue(device: CudaDevice) -> tuple[tuple[Probe, ...], list[dict[str, str]]]:
    cm = device.kernels.models
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
                accounting="bytes = 16·n_vec per pass; buffer L2/4, ld.global.cg loads "
                "(L1 bypassed), so every pass after the warm-up is served by L2, never by L1",
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
            accounting="bytes = 16·n_vec per pass; "
            f"{L1_PROBE_SM_FOOTPRINT_BYTES // 1024} KiB per SM "
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
                f"; diagnostic on sm_{device.cc[0]}{device.cc[1]}: mma.sync {mdt} runs below "
                f"the native tensor path (wgmma), so it is never the {mdt} ceiling — "
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
                accounting=f"FLOPs = warps·8·iters·2·{m}·{n}·{k} "
                f"(m{m}n{n}k{k}, 8 independent accumulators)"
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
            accounting="per fp32 element read: nfma dependent FMAs (2·nfma FLOPs), 4 bytes; "
            "nothing written → intensity nfma/2 FLOP/B; nfma = max(1, k/2) for the plan's k",
            note="probe_intensity_fp32 (mixbench-style), L2 flushed before each call",
        )
    )
    return tuple(probes), skipped
