"""Place your own function on this machine's roofline with ``roofprof.measure``.

Give ``roofprof.measure`` a callable that does the work once, with the FLOPs and the minimum
bytes of one call; it times it (warm-up, repeats sized by a time budget, raw samples kept)
and returns the median time, the achieved FLOP/s and bytes/s, the arithmetic intensity, the
attainable roof at that intensity, the percent of roof and the bound. ``flush=True`` evicts
the caches before every timed call, so the weights come from DRAM as in a real decode step
(without it, a 17 MB matrix that fits in the last-level cache can appear to beat the DRAM
roof).

Here: the GEMV of one Llama 3.2 1B ``q_proj`` for a single token (``y = W·x``, W of
2048 × 2048), written three ways, on the CPU with numpy (and with CuPy or torch on a GPU
when they are installed)::

    python examples/measure_my_function.py --device cpu
"""

from __future__ import annotations

import numpy as np
from _common import device, parse, roofline_of, si

import roofprof

N = K = 2048  # Llama 3.2 1B hidden size: q_proj is 2048 x 2048


def cpu_candidates(dtype: np.dtype):
    """(name, fn, check) for numpy versions of y = W x; ``check`` compares with float64."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((N, K)).astype(dtype)
    x = rng.standard_normal(K).astype(dtype)
    ref = w.astype(np.float64) @ x.astype(np.float64)
    out = np.empty(N, dtype=dtype)

    def matvec():
        np.matmul(w, x, out=out)
        return out

    def einsum():
        return np.einsum("nk,k->n", w, x)

    def rows_dot():  # one dot product per row block: slower, same work
        for i in range(0, N, 256):
            out[i : i + 256] = w[i : i + 256] @ x
        return out

    for name, fn in (("np.matmul", matvec), ("np.einsum", einsum), ("blocked rows", rows_dot)):
        yield (
            name,
            fn,
            lambda fn=fn: np.allclose(fn(), ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max()),
        )


def gpu_candidates(label: str):
    """The same GEMV with torch (bf16) on a GPU, when torch with CUDA is installed."""
    try:
        import torch
    except ImportError:
        return
    w = torch.randn(N, K, device=label, dtype=torch.bfloat16)
    x = torch.randn(K, device=label, dtype=torch.bfloat16)
    ref = w.double() @ x.double()
    yield (
        "torch.mv bf16",
        lambda: torch.mv(w, x),
        lambda: torch.allclose(
            torch.mv(w, x).double(), ref, rtol=2e-2, atol=2e-2 * ref.abs().max()
        ),
    )


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    dev = device(args.device)
    info = dev.info
    roof = roofline_of(dev, args.roofline)
    if info.asynchronous:
        dtype, elem, cands = "bf16", 2, list(gpu_candidates(info.torch_device))
    else:
        dtype, elem, cands = "fp32", 4, list(cpu_candidates(np.float32))
    flops = 2.0 * N * K
    bytes_ = (N * K + K + N) * elem  # the weights once, x in, y out
    print(f"y = W·x, W {N}x{K} {dtype}: {flops / 1e6:.1f} MFLOP, {bytes_ / 1e6:.1f} MB per call\n")
    print(f"{'implementation':<16}{'median':>10}{'achieved':>14}{'FLOP/B':>8}{'% roof':>8}  bound")
    for name, fn, check in cands:
        if not check():  # correctness before timing: a wrong-but-fast kernel is never reported
            print(f"{name:<16} wrong result, not timed")
            continue
        r = roofprof.measure(
            fn,
            flops=flops,
            bytes=bytes_,
            dtype=dtype,
            device=dev,
            roofline=roof,
            name=name,
            budget_s=0.2,
            flush=True,
        )
        p = r.placement()
        print(
            f"{name:<16}{si(r.seconds, 's'):>10}{si(r.bytes_per_s, 'B/s'):>14}{r.intensity:>8.2f}"
            f"{p['percent_of_roof']:>7.0f}%  {p['bound']}"
        )


if __name__ == "__main__":
    main()
