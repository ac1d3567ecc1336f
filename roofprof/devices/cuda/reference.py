"""``cupy-ref``: the non-GEMM ops of a pass on a CUDA GPU as plain CuPy array code.

RMSNorm, RoPE, residual adds, SiLU·mul, the embedding gather and fused attention compute in
float32 (bf16 stored as its 16 bits); fused attention runs through ``torch``'s SDPA when
torch has CUDA (else CuPy: batched matmuls and a softmax, chunked over heads). It exists so
that a profile on a GPU without torch covers the whole pass. Dispatch is on ``Op.fn``
(what an op computes), never on its name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from roofprof.devices.base import CheckResult, compare
from roofprof.devices.cuda.buffers import (
    ITEMSIZE,
    CupyBuffers,
    TorchBuffers,
    check_tolerance,
    sample_indices,
    torch_cuda_reason,
)
from roofprof.errors import ConfigError

if TYPE_CHECKING:
    from roofprof.devices.cuda.device import CudaDevice
    from roofprof.workload import Op

__all__ = ["CupyReference", "PreparedRef", "attention_group"]


def attention_group(op: Op) -> int:
    """Query heads per KV head of a fused attention op, inferred from its byte count.

    the Llama family counts (per layer, ``e`` bytes per element, ``B = batch·heads``):
    prefill ``e·(2·B·tq·d + 4·(B/g)·tq·d)``, decode ``e·(2·B·d + 2·(B/g)·d·(keys+1))``.
    Returns 1 when the bytes do not fit that form (e.g. fused elementwise conventions).

    >>> from roofprof.specs import load_model
    >>> from roofprof import models
    >>> from roofprof.workload import Scenario
    >>> scenario = Scenario(load_model("llama-3.1-8b"), "decode", batch=2, context_tokens=100)
    >>> ops = models.ops(scenario).ops
    >>> attention_group(next(o for o in ops if o.name == "attention"))
    4
    """
    e = ITEMSIZE.get(op.dtype, 2)
    big_b, tq, keys, d = op.batch, op.m, op.n, op.k
    units = op.bytes / e
    if op.phase == "prefill":
        rest, per_g = units - 2 * big_b * tq * d, 4 * big_b * tq * d
    else:
        rest, per_g = units - 2 * big_b * d, 2 * big_b * d * (keys + 1)
    if rest <= 0:
        return 1
    g = per_g / rest
    gi = int(round(g))
    return gi if gi >= 1 and abs(g - gi) < 1e-6 and big_b % gi == 0 else 1


class PreparedRef:
    """A non-GEMM op on the GPU: ``calls`` (one here), a float64 host reference for ``check``."""

    def __init__(
        self,
        device: CudaDevice,
        op: Op,
        bufs: Any,
        run: Callable[[], Any],
        reference: Callable[[], tuple[np.ndarray, np.ndarray]],
        inputs: Sequence[str],
        rng: np.random.Generator,
        name: str,
        kernels: int,
        note: str,
        tolerance: float | None = None,
    ):
        self.device, self.op, self.bufs, self._run = device, op, bufs, run
        self._reference, self._inputs, self.rng = reference, list(inputs), rng
        self.name, self.kernels, self.note = name, kernels, note
        self.tolerance = tolerance

    def run(self) -> Any:
        return self._run()

    def check(self) -> CheckResult:
        for name in self._inputs:
            self.bufs.fill_random(name, int(self.rng.integers(1, 2**31 - 1)))
        self.bufs.poison("out")
        self.run()
        self.device.checked(self.name)
        bad = self.bufs.nonfinite("out")
        tol = self.tolerance if self.tolerance is not None else check_tolerance(self.op.dtype)
        if bad:
            return CheckResult(
                False, math.inf, math.inf, tol, f"{self.name}: {bad} outputs not finite"
            )
        got, ref = self._reference()
        return compare(
            got, ref, tol, f"{self.name} vs float64 numpy on sampled rows; output poisoned"
        )

    def release(self) -> None:
        self.bufs.release()
        self.device.release_memory()


class CupyReference:
    """``cupy-ref``: the non-GEMM ops of a pass as plain CuPy array code (fp32 compute).

    RMSNorm (as transformers: normalise in fp32, round, times the weight), residual add,
    SiLU·mul, RoPE (rotate-half over heads of 128 or the head size the op's bytes imply),
    embedding gather, and fused attention: ``torch`` SDPA when torch has CUDA, else CuPy
    (scores, softmax, PV in fp32, chunked over KV heads). Eager attention steps are left to
    ``torch-eager``.
    """

    name = "cupy-ref"
    DTYPES = ("fp32", "fp16", "bf16")

    def __init__(self, device: CudaDevice):
        self.device = device

    #: ``Op.fn`` → how it runs here.
    FNS = ("rmsnorm", "rope", "add", "silu_mul", "gather", "sdpa")
    _EAGER_ATTENTION = (
        "eager attention steps are measured by torch-eager (roofprof.profiling.torch_ops)"
    )
    _ELSEWHERE = {
        "linear": "cupy-ref covers the non-GEMM ops (GEMMs: cupy, numba, cublas, torch)",
        "onehot_matmul": "embedding counted as a matmul (rule-of-thumb convention) is not a gather",
        "qk_matmul": _EAGER_ATTENTION,
        "softmax": _EAGER_ATTENTION,
        "pv_matmul": _EAGER_ATTENTION,
    }

    def supports(self, op: Op) -> str | None:
        """None for the non-GEMM ``Op.fn`` of :data:`FNS` in fp32/fp16/bf16, else why not."""
        if op.kind == "gemm":
            return self._ELSEWHERE["linear"]
        if op.dtype not in self.DTYPES:
            return f"cupy-ref computes fp32/fp16/bf16 only, not {op.dtype}"
        if op.fn in self._ELSEWHERE:
            return self._ELSEWHERE[op.fn]
        if op.fn not in self.FNS:
            return (
                f"no cupy-ref implementation of {op.fn!r} (op {op.name!r})"
                if op.fn
                else f"op {op.name!r} does not say what it computes (Op.fn is empty)"
            )
        return None

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedRef:
        """Buffers for ``op`` by what it computes (``Op.fn``).

        Raises:
            ConfigError: unsupported op (:meth:`supports` says why) or buffers too large.
        """
        reason = self.supports(op)
        if reason:
            raise ConfigError(reason)
        if op.fn == "sdpa":
            return self._attention(op, rng)
        if op.fn == "rmsnorm":
            return self._norm(op, rng)
        if op.fn == "gather":
            return self._embedding(op, rng)
        if op.fn == "rope":
            return self._rope(op, rng)
        return self._binary(op, rng, op.fn)

    # -- elementwise -----------------------------------------------------------------
    def _binary(self, op: Op, rng: np.random.Generator, kind: str) -> PreparedRef:
        dev, dt, m, n = self.device, op.dtype, op.m, op.n
        bufs = CupyBuffers(
            dev, {"a": (m, n), "b": (m, n), "out": (m, n)}, dt, f"op {op.name!r} (cupy-ref)"
        )
        cp = dev.cupy
        a, b, out = bufs["a"], bufs["b"], bufs["out"]

        def run() -> None:
            dev.last_kernel = f"cupy-ref {op.name}"
            x, y = bufs.to_f32(a, dt), bufs.to_f32(b, dt)
            r = x / (1.0 + cp.exp(-x)) * y if kind == "silu_mul" else x + y
            out[...] = bufs.from_f32(r, dt)

        rows = sample_indices(m, 8, rng)

        def reference():
            x, y = bufs.host("a", rows), bufs.host("b", rows)
            ref = x / (1.0 + np.exp(-x)) * y if kind == "silu_mul" else x + y
            return bufs.host("out", rows), ref

        return PreparedRef(
            dev,
            op,
            bufs,
            run,
            reference,
            ["a", "b"],
            rng,
            f"cupy-ref {op.name}",
            5 if kind == "silu_mul" else 3,
            f"CuPy {kind} in fp32",
        )

    def _norm(self, op: Op, rng: np.random.Generator) -> PreparedRef:
        dev, dt, m, n = self.device, op.dtype, op.m, op.n
        bufs = CupyBuffers(
            dev, {"x": (m, n), "weight": (1, n), "out": (m, n)}, dt, f"op {op.name!r} (cupy-ref)"
        )
        cp = dev.cupy
        x, wt, out = bufs["x"], bufs["weight"], bufs["out"]
        eps = 1e-5

        def run() -> None:
            dev.last_kernel = f"cupy-ref {op.name}"
            h = bufs.to_f32(x, dt)
            h = h * (1.0 / cp.sqrt((h * h).mean(axis=1, keepdims=True) + eps))
            h = bufs.to_f32(bufs.from_f32(h, dt), dt)  # round to the dtype, as transformers does
            out[...] = bufs.from_f32(h * bufs.to_f32(wt, dt), dt)

        rows = sample_indices(m, 8, rng)

        def reference():
            h = bufs.host("x", rows)
            h = h / np.sqrt((h * h).mean(axis=1, keepdims=True) + eps)
            return bufs.host("out", rows), h * bufs.host("weight")

        return PreparedRef(
            dev,
            op,
            bufs,
            run,
            reference,
            ["x", "weight"],
            rng,
            f"cupy-ref {op.name}",
            5,
            "CuPy RMSNorm in fp32 (transformers' order)",
            tolerance=2 * check_tolerance(dt, n),
        )

    def _rope(self, op: Op, rng: np.random.Generator) -> PreparedRef:
        dev, dt, m, n = self.device, op.dtype, op.m, op.n
        e = ITEMSIZE[dt]
        hd = int(round((op.bytes / e - 2 * m * n) / (2 * m))) if op.bytes else 128
        if hd < 2 or hd % 2 or n % hd:
            hd = 128 if n % 128 == 0 else 2
        bufs = CupyBuffers(
            dev,
            {"x": (m, n), "cos": (m, hd), "sin": (m, hd), "out": (m, n)},
            dt,
            f"op {op.name!r} (cupy-ref)",
        )
        cp = dev.cupy
        x, cos, sin, out = bufs["x"], bufs["cos"], bufs["sin"], bufs["out"]
        heads, half = n // hd, hd // 2

        def run() -> None:
            dev.last_kernel = "cupy-ref rope"
            v = bufs.to_f32(x, dt).reshape(m, heads, hd)
            rot = cp.concatenate([-v[..., half:], v[..., :half]], axis=-1)
            c, s = bufs.to_f32(cos, dt)[:, None, :], bufs.to_f32(sin, dt)[:, None, :]
            out[...] = bufs.from_f32((v * c + rot * s).reshape(m, n), dt)

        rows = sample_indices(m, 8, rng)

        def reference():
            v = bufs.host("x", rows).reshape(len(rows), heads, hd)
            rot = np.concatenate([-v[..., half:], v[..., :half]], axis=-1)
            c, s = bufs.host("cos", rows)[:, None, :], bufs.host("sin", rows)[:, None, :]
            return bufs.host("out", rows), (v * c + rot * s).reshape(len(rows), n)

        return PreparedRef(
            dev,
            op,
            bufs,
            run,
            reference,
            ["x", "cos", "sin"],
            rng,
            "cupy-ref rope",
            6,
            f"CuPy rotate-half RoPE over {heads} heads of {hd}",
            tolerance=2 * check_tolerance(dt),
        )

    def _embedding(self, op: Op, rng: np.random.Generator) -> PreparedRef:
        dev, dt, m, n = self.device, op.dtype, op.m, op.n
        table_rows = max(4096, m)
        bufs = CupyBuffers(
            dev,
            {"table": (table_rows, n), "out": (m, n)},
            dt,
            f"op {op.name!r} (cupy-ref)",
            extra_bytes=8 * m,
        )
        cp = dev.cupy
        table, out = bufs["table"], bufs["out"]
        ids_host = rng.integers(0, table_rows, size=m)
        ids = cp.asarray(ids_host)

        def run() -> None:
            dev.last_kernel = "cupy-ref embedding"
            cp.take(table, ids, axis=0, out=out)

        rows = sample_indices(m, 8, rng)

        def reference():
            return bufs.host("out", rows), bufs.host("table", ids_host[rows])

        return PreparedRef(
            dev,
            op,
            bufs,
            run,
            reference,
            ["table"],
            rng,
            "cupy-ref embedding",
            1,
            f"cupy.take of {m} rows from a {table_rows}-row table",
            tolerance=0.0,
        )

    # -- attention -----------------------------------------------------------------------
    def _attention(self, op: Op, rng: np.random.Generator) -> PreparedRef:
        dev, dt = self.device, op.dtype
        g = attention_group(op)
        bkv, tq, keys, d = op.batch // g, op.m, op.n, op.k
        causal = op.phase == "prefill" and tq > 1
        shapes = {
            "q": (bkv, g, tq, d),
            "k": (bkv, 1, keys, d),
            "v": (bkv, 1, keys, d),
            "out": (bkv, tq, g * d),
        }
        use_torch = torch_cuda_reason() is None
        what = f"op {op.name!r} (cupy-ref)"
        if use_torch:
            bufs = TorchBuffers(dev, shapes, dt, what)
        else:
            scores = bkv * g * tq * keys * 4
            bufs = CupyBuffers(dev, shapes, dt, what, extra_bytes=min(scores, 1 << 30) * 2)
        q, k, v, out = bufs["q"], bufs["k"], bufs["v"], bufs["out"]
        scale = 1.0 / math.sqrt(d)
        if use_torch:
            from roofprof.models.llama_torch import attention_sdpa

            def run() -> None:
                dev.last_kernel = "torch SDPA"
                out.copy_(attention_sdpa(q, k, v).reshape(out.shape))

            kernels, how = 2, "torch SDPA (enable_gqa)"
        else:
            cp = dev.cupy
            per_head = g * tq * keys * 4
            chunk = max(1, min(bkv, (512 << 20) // max(per_head, 1)))
            mask = None
            if causal:
                mask = cp.triu(cp.full((tq, keys), -cp.inf, dtype=cp.float32), k=1 + keys - tq)

            def run() -> None:
                dev.last_kernel = "cupy-ref attention"
                for s in range(0, bkv, chunk):
                    qq = bufs.to_f32(q[s : s + chunk], dt).reshape(-1, g * tq, d)
                    kk = bufs.to_f32(k[s : s + chunk], dt).reshape(-1, keys, d)
                    vv = bufs.to_f32(v[s : s + chunk], dt).reshape(-1, keys, d)
                    sc = cp.matmul(qq, kk.transpose(0, 2, 1)) * scale
                    if mask is not None:
                        sc = (sc.reshape(-1, g, tq, keys) + mask).reshape(-1, g * tq, keys)
                    sc = cp.exp(sc - sc.max(axis=-1, keepdims=True))
                    sc /= sc.sum(axis=-1, keepdims=True)
                    o = (
                        cp.matmul(sc, vv)
                        .reshape(-1, g, tq, d)
                        .transpose(0, 2, 1, 3)
                        .reshape(-1, tq, g * d)
                    )
                    out[s : s + chunk] = bufs.from_f32(o, dt)

            kernels, how = (
                10 * (-(-bkv // chunk)),
                "CuPy fp32 scores, softmax, PV (chunked over KV heads)",
            )

        heads = sample_indices(bkv, 3, rng)

        def reference():
            got = bufs.host("out", heads).reshape(len(heads), tq, g, d)
            qh = bufs.host("q", heads)  # [h, g, tq, d]
            kh = bufs.host("k", heads)[:, 0]
            vh = bufs.host("v", heads)[:, 0]
            sc = np.einsum("hgqd,hkd->hgqk", qh, kh) * scale
            if causal:
                allowed = np.arange(keys)[None, :] <= (np.arange(tq)[:, None] + (keys - tq))
                sc = np.where(allowed, sc, -np.inf)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            ref = np.einsum("hgqk,hkd->hqgd", sc, vh)
            return got, ref

        note = (
            f"{how}; {bkv} KV heads × {g} query heads, {tq} queries, {keys} keys, head dim {d}"
            + (", causal" if causal else "")
        )
        return PreparedRef(
            dev,
            op,
            bufs,
            run,
            reference,
            ["q", "k", "v"],
            rng,
            "cupy-ref attention",
            kernels,
            note,
            tolerance=2 * check_tolerance(dt, keys),
        )
