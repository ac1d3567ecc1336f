"""torch implementations of every op of a Llama pass, for ``roofprof profile``.

:class:`TorchOps` implements the :class:`~roofprof.devices.base.OpImpl` protocol for every
op a model family lists (:func:`roofprof.models.ops`) (GEMMs, RMSNorm, RoPE, residual adds,
SiLU·mul, attention fused through SDPA or eager in three steps, the embedding gather) by
calling the very functions the plain-torch model of :mod:`roofprof.models.llama_torch` calls, on a
CPU or a CUDA device. This is the "reference" implementation: what eager PyTorch (and
transformers' ``LlamaForCausalLM``) executes, op by op, so the sum of its times is what a
real forward pass should take.

Measurement hygiene:

* Correct first: :meth:`PreparedTorchOp.check` recomputes sampled rows (or heads) of the
  output in float64 from the same inputs and compares (norm-wise relative error against a
  tolerance from the dtype's epsilon and the reduction length).
* Weights are cold, activations warm, as in a real pass: a GEMM rotates among enough
  copies of its weight matrix to exceed twice the last-level cache
  (``PreparedTorchOp.calls``, used in turn by :func:`roofprof.timing.benchmark`), while its
  input activation stays the same tensor.
* Every call allocates its output, as eager torch does.

``kernels`` on a prepared op is the number of torch kernels one call launches (used for the
launch-overhead model of the ``measured`` estimator).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from roofprof.devices.base import CheckResult, tolerance  # tolerance: the one policy, API here too
from roofprof.devices.pool import (  # malloc_trimmer: API here too
    InputPool,
    cold_copies,
    malloc_trimmer,
    weight_key,
)
from roofprof.specs import ModelSpec
from roofprof.workload import Op

__all__ = [
    "SUPPORTED_FNS",
    "PreparedTorchOp",
    "TorchOps",
    "family_preparers",
    "fresh_page_bytes",
    "in_fresh_pages",
    "malloc_trimmer",
    "tolerance",
]

#: What each op computes (``Op.fn``) -> the TorchOps method that prepares it (the fns every
#: family shares; a family adds its own through the ``PREPARERS`` of its torch module,
#: :class:`roofprof.models.families.TorchSide`).
_PREPARE = {
    "linear": "_gemm",
    "rmsnorm": "_norm",
    "add": "_residual",
    "silu_mul": "_silu_mul",
    "rope": "_rope",
    "gather": "_embedding",
    "onehot_matmul": "_embedding",
    "sdpa": "_attention_fused",
    "qk_matmul": "_attention_eager",
    "softmax": "_attention_eager",
    "pv_matmul": "_attention_eager",
}
#: The ``Op.fn`` values TorchOps implements for every family.
SUPPORTED_FNS = tuple(_PREPARE)


def family_preparers(family: str) -> dict[str, Callable[..., PreparedTorchOp]]:
    """``Op.fn`` -> ``preparer(torch_ops, op)`` that family ``family``'s torch module adds (may be
    empty)."""
    import importlib

    from roofprof.models.families import torch_side

    side = torch_side(family)
    if side is None:
        return {}
    return dict(getattr(importlib.import_module(side.module), "PREPARERS", {}))


@dataclass
class PreparedTorchOp:
    """An op with its torch tensors allocated; ``calls`` are equivalent calls over rotated
    weights."""

    op: Op
    calls: Sequence[Callable[[], Any]]
    reference: Callable[[], tuple[np.ndarray, np.ndarray]]
    reduction: int
    kernels: int
    synchronize: Callable[[], None]
    note: str = ""
    buffers: list[Any] = field(default_factory=list)
    before_call: Callable[[], Any] | None = None  # run before each timed call, outside the timing

    def run(self) -> Any:
        """One call (the first weight set)."""
        return self.calls[0]()

    def check(self) -> CheckResult:
        """Sampled output rows against a float64 recomputation from the same inputs."""
        from roofprof.devices.base import compare

        out, ref = self.reference()
        self.synchronize()
        return compare(out, ref, tolerance(self.op.dtype, self.reduction), note=self.note)

    def release(self) -> None:
        self.calls = ()
        self.buffers.clear()


class TorchOps:
    """torch (eager) implementations of the ops of one Llama model.

    Args:
        model: the model the ops come from (head counts and sizes the ops do not carry).
        device: torch device string (``"cpu"``, ``"cuda:0"``).
        cache_bytes: last-level cache size; GEMM weights rotate over at least twice this.
        max_rotation: cap on weight copies per GEMM.
        memory_bytes: memory free for buffers (``prepare`` refuses beyond it).
        pool_bytes: the most the shared-weights pool holds (default 2 GiB).

    >>> from roofprof.models import ops
    >>> from roofprof.specs import ModelSpec
    >>> from roofprof.workload import Scenario
    >>> spec = ModelSpec("tiny", hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
    ...                  num_kv_heads=2, head_dim=16, vocab_size=100, tie_word_embeddings=True,
    ...                  max_position_embeddings=256)
    >>> impl = TorchOps(spec)
    >>> op = ops(Scenario(spec, "decode", context_tokens=8, dtype="fp32")).ops[2]
    >>> p = impl.prepare(op, np.random.default_rng(0))
    >>> op.name, p.check().ok
    ('q_proj', True)
    """

    name = "torch"

    def __init__(
        self,
        model: ModelSpec,
        device: str = "cpu",
        *,
        cache_bytes: int = 32 << 20,
        max_rotation: int = 16,
        memory_bytes: int | None = None,
        pool_bytes: int | None = None,
        pool: InputPool | None = None,
    ):
        import torch

        self.torch = torch
        self.model = model
        self.device = device
        self.cache_bytes = int(cache_bytes)
        self.max_rotation = max_rotation
        self.memory_bytes = memory_bytes
        self.is_cuda = str(device).startswith("cuda")
        #: weights and tables shared by the ops of one shape (batch sizes, sweep points); on the
        #: CPU the device's pool, shared with numpy and numba (``pool``)
        self.inputs = (
            pool
            if pool is not None
            else InputPool(pool_bytes if pool_bytes is not None else 2 << 30)
        )
        #: ``Op.fn`` -> preparer: the shared methods, then the model family's own (which win).
        self.preparers: dict[str, Callable[[Op], PreparedTorchOp]] = {
            fn: getattr(self, method) for fn, method in _PREPARE.items()
        }
        for fn, preparer in family_preparers(model.family).items():
            self.preparers[fn] = functools.partial(preparer, self)

    @classmethod
    def for_device(cls, model: ModelSpec, device: Any) -> TorchOps:
        """TorchOps on a roofprof Device: its torch device, its last-level cache and, on the CPU,
        its input pool (so numpy, numba and torch time the same weight buffers)."""
        info = device.info
        return cls(
            model,
            info.torch_device,
            cache_bytes=info.last_level_cache_bytes or (32 << 20),
            pool=getattr(device, "inputs", None) if info.torch_device == "cpu" else None,
        )

    def release_buffers(self) -> None:
        """Drop the shared weights (ops that still hold one keep theirs)."""
        self.inputs.clear()

    # -- protocol ------------------------------------------------------------------------
    def supports(self, op: Op) -> str | None:
        from roofprof.models.llama_torch import TORCH_DTYPES

        if op.fn not in self.preparers:
            return f"no torch implementation of op {op.name!r} (fn {op.fn!r})"
        if op.dtype not in TORCH_DTYPES:
            return f"torch eager has no {op.dtype} path for {op.name}"
        if op.dtype == "tf32" and not self.is_cuda:
            return "tf32 exists only on NVIDIA GPUs"
        return None

    def prepare(self, op: Op, rng: np.random.Generator) -> PreparedTorchOp:
        """Allocate inputs (and rotated weight copies) for ``op`` on the device.

        Raises:
            ConfigError: the buffers would not fit in ``memory_bytes``.
        """
        reason = self.supports(op)
        if reason:
            from roofprof.errors import ConfigError

            raise ConfigError(reason)
        self._seed = int(rng.integers(0, 2**31 - 1))
        return self.preparers[op.fn](op)

    # -- helpers (the public ones are for the preparers of the families' torch modules) ----
    def randn(self, shape, op: Op, std: float = 1.0):
        """N(0, std²) values of ``op``'s dtype on the device."""
        return self._randn(shape, op, std)

    def sample_rows(self, n: int, limit: int = 8) -> list[int]:
        """Row indices checked against the float64 reference (first, last, spread between)."""
        return self._rows(n, limit)

    def to_numpy(self, t) -> np.ndarray:
        """A tensor as a float64 numpy array on the host."""
        return self._np(t)

    def prepared(
        self, op: Op, calls, reference, reduction: int, kernels: int, note: str = "", buffers=()
    ) -> PreparedTorchOp:
        """A :class:`PreparedTorchOp` (fresh output pages on the CPU for large non-GEMM outputs)."""
        return self._prepared(op, calls, reference, reduction, kernels, note, buffers)

    def dtype_of(self, op: Op):
        """The torch dtype of ``op``."""
        return self._dtype(op)

    def _dtype(self, op: Op):
        from roofprof.models.llama_torch import torch_dtype

        return torch_dtype(op.dtype)

    def _randn(self, shape, op: Op, std: float = 1.0, seed: int | None = None):
        """N(0, std²) values drawn on the device itself (a GPU draws gigabytes in milliseconds)."""
        torch = self.torch
        where = self.device if self.is_cuda else "cpu"
        self._seed += 1
        seed = self._seed if seed is None else seed
        if not self.is_cuda and math.prod(shape) >= 1 << 20:
            # the CPU draws ~125 M normals/s (2 threads here): tile a random block over tensors
            # of 4 MB and more (every GEMM weight copy of a Llama layer, the lm_head, the
            # embedding)
            from roofprof.models.llama_torch import fill_random_

            return fill_random_(torch.empty(*shape, dtype=self._dtype(op)), std=std, seed=seed)
        gen = torch.Generator(device=where).manual_seed(seed)
        t = torch.randn(*shape, generator=gen, dtype=torch.float32, device=where)
        if std != 1.0:
            t.mul_(std)
        return t.to(dtype=self._dtype(op))

    def _weight(self, n: int, k: int, op: Op, copy: int):
        """Copy ``copy`` of the ``[n, k]`` weight in ``op``'s dtype, from the shared pool (drawn
        once; numpy's array when numpy drew it first, viewed as a tensor without copying)."""
        w = self.inputs.get(
            weight_key((), n, k, op.dtype, copy),
            lambda: self._randn((n, k), op, std=k**-0.5, seed=1000 + copy),
        )
        return w if isinstance(w, self.torch.Tensor) else self.torch.from_numpy(w)

    def _sync(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize(self.device)

    def _check_memory(self, op: Op, nbytes: float) -> None:
        if self.memory_bytes is not None and nbytes > self.memory_bytes:
            from roofprof.errors import ConfigError

            raise ConfigError(
                f"op {op.name}: buffers need {nbytes / 1e9:.2f} GB, "
                f"{self.memory_bytes / 1e9:.2f} GB free"
            )

    @staticmethod
    def _rows(n: int, limit: int = 8) -> list[int]:
        return sorted({0, n - 1, *np.linspace(0, n - 1, num=min(n, limit)).astype(int).tolist()})

    def _np(self, t) -> np.ndarray:
        return t.detach().to("cpu", dtype=self.torch.float64).numpy()

    def _prepared(self, op, calls, reference, reduction, kernels, note="", buffers=()):
        before = None
        if not self.is_cuda and in_fresh_pages(op, self._dtype(op).itemsize):
            before = malloc_trimmer()
            if before is not None:
                note = (
                    note + "; " if note else ""
                ) + "outputs in fresh pages (freed memory returned to the OS between calls)"
        return PreparedTorchOp(
            op, tuple(calls), reference, reduction, kernels, self._sync, note, list(buffers), before
        )

    # -- ops -----------------------------------------------------------------------------
    def _gemm(self, op: Op) -> PreparedTorchOp:
        import torch.nn.functional as F

        item = self._dtype(op).itemsize
        weight_bytes = op.n * op.k * item
        copies = cold_copies(weight_bytes, self.cache_bytes, self.max_rotation)
        self._check_memory(op, copies * weight_bytes + op.m * (op.n + op.k) * item)
        x = self._randn((op.m, op.k), op)
        # the weights are shared with every other op of this shape and dtype (batch sizes,
        # sweep points): drawn once, their values do not matter to the timing
        ws = [self._weight(op.n, op.k, op, i) for i in range(copies)]
        calls = [(lambda w=w: F.linear(x, w)) for w in ws]
        rows = self._rows(op.m)
        cols = self._rows(op.n, 256)

        def reference():  # sampled rows × columns: never a float64 copy of a 1 GB weight
            out = self._np(F.linear(x, ws[0])[rows][:, cols])
            ref = self._np(x[rows]) @ self._np(ws[0][cols]).T
            return out, ref

        cold = (
            f"weights rotated over {copies} copies (cold)"
            if copies > 1
            else (
                "weights warm (small)"
                if weight_bytes < (1 << 20)
                else "one weight copy (larger than the caches)"
            )
        )
        return self._prepared(
            op, calls, reference, op.k, 1, f"F.linear, {cold}, input warm", [x, ws]
        )

    def _norm(self, op: Op) -> PreparedTorchOp:
        from roofprof.models.llama_torch import rms_norm

        x = self._randn((op.m, op.n), op)
        w = 1.0 + 0.1 * self._randn((op.n,), op)
        rows = self._rows(op.m)

        def reference():
            out = self._np(rms_norm(x, w)[rows])
            xr = self._np(x[rows])
            ref = self._np(w) * xr / np.sqrt((xr**2).mean(-1, keepdims=True) + 1e-5)
            return out, ref

        kernels = 6 + (2 if op.dtype != "fp32" else 0)  # to, pow, mean, add, rsqrt, mul, to, mul
        return self._prepared(
            op,
            [lambda: rms_norm(x, w)],
            reference,
            op.n,
            kernels,
            "RMSNorm as transformers (float32 inside)",
            [x, w],
        )

    def _residual(self, op: Op) -> PreparedTorchOp:
        a, b = self._randn((op.m, op.n), op), self._randn((op.m, op.n), op)
        rows = self._rows(op.m)

        def reference():
            return self._np((a + b)[rows]), self._np(a[rows]) + self._np(b[rows])

        return self._prepared(op, [lambda: a + b], reference, 1, 1, "residual add", [a, b])

    def _silu_mul(self, op: Op) -> PreparedTorchOp:
        from roofprof.models.llama_torch import silu_mul

        g, u = self._randn((op.m, op.n), op), self._randn((op.m, op.n), op)
        rows = self._rows(op.m)

        def reference():
            gr, ur = self._np(g[rows]), self._np(u[rows])
            return self._np(silu_mul(g, u)[rows]), gr / (1 + np.exp(-gr)) * ur

        return self._prepared(
            op, [lambda: silu_mul(g, u)], reference, 1, 2, "F.silu(gate) * up", [g, u]
        )

    def _split_rows(self, op: Op) -> tuple[int, int]:
        """(batch, tokens per sequence) of an op's activation rows (phase-dependent)."""
        if op.phase == "decode":
            return op.m, 1
        return 1, op.m  # prefill: one long row block (the kernels see the same rows either way)

    def _rope(self, op: Op) -> PreparedTorchOp:
        from roofprof.models.llama_torch import apply_rope, rope_cos_sin, rope_inv_freq

        torch = self.torch
        m = self.model
        d = m.head_dim
        b, s = self._split_rows(op)
        ql = self._randn((b, s, m.q_size), op)
        kl = self._randn((b, s, m.kv_size), op)
        pos = (torch.arange(s, device=self.device) + 7)[None].expand(b, s)
        cos, sin = rope_cos_sin(pos, rope_inv_freq(d), self._dtype(op))

        def call():
            q = ql.view(b, s, -1, d).transpose(1, 2)
            k = kl.view(b, s, -1, d).transpose(1, 2)
            return apply_rope(q, k, cos, sin)

        def reference():
            q, _ = call()
            qn = self._np(ql).reshape(b, s, -1, d).transpose(0, 2, 1, 3)
            c, sn = self._np(cos)[:, None], self._np(sin)[:, None]
            rot = np.concatenate([-qn[..., d // 2 :], qn[..., : d // 2]], axis=-1)
            return self._np(q), qn * c + rot * sn

        return self._prepared(
            op,
            [call],
            reference,
            1,
            10,
            "apply_rotary_pos_emb on q and k (views of the projections)",
            [ql, kl, cos, sin],
        )

    def _embedding(self, op: Op) -> PreparedTorchOp:
        import torch.nn.functional as F

        torch = self.torch
        vocab = self.model.vocab_size
        self._check_memory(op, vocab * op.n * self._dtype(op).itemsize)
        # the lm_head's weight has the embedding table's shape (tied in Llama 3.2): one buffer
        # for both, drawn once (the gather's timing does not depend on the values)
        table = self._weight(vocab, op.n, op, 0)
        gen = torch.Generator(device="cpu").manual_seed(self._seed)
        ids = torch.randint(0, vocab, (op.m,), generator=gen).to(self.device)
        rows = self._rows(op.m)

        def reference():
            out = self._np(F.embedding(ids, table)[rows])
            return out, self._np(table[ids[rows]])  # the gathered rows, read back independently

        return self._prepared(
            op,
            [lambda: F.embedding(ids, table)],
            reference,
            1,
            1,
            "F.embedding gather",
            [table, ids],
        )

    def _attention_inputs(self, op: Op):
        """q [b,h,s,d], the cache K/V [b,kvh,ctx,d] (decode) and new K/V [b,kvh,s,d]."""
        m = self.model
        heads, kvh, d = m.num_heads, m.num_kv_heads, m.head_dim
        b = max(1, op.batch // heads)
        s = op.m
        keys = op.k if op.fn == "pv_matmul" else op.n  # PV is [tq, keys]·[keys, d]: keys are its K
        q = self._randn((b, s, heads, d), op).transpose(
            1, 2
        )  # a transposed view, as after q_proj + RoPE
        k_new = self._randn((b, s, kvh, d), op).transpose(1, 2)
        v_new = self._randn((b, s, kvh, d), op).transpose(1, 2)
        ctx = keys - s if op.phase == "decode" else 0
        k_cache = self._randn((b, kvh, ctx, d), op) if ctx else None
        v_cache = self._randn((b, kvh, ctx, d), op) if ctx else None
        return b, s, keys, q, k_new, v_new, k_cache, v_cache

    def _attention_fused(self, op: Op) -> PreparedTorchOp:
        from roofprof.models.llama_torch import attention_sdpa

        torch = self.torch
        b, s, keys, q, k_new, v_new, k_cache, v_cache = self._attention_inputs(op)

        # decode: the cache append copies the whole cache into new buffers (as DynamicCache's
        # torch.cat), which a decode loop takes from the memory the previous step freed. Into
        # buffers drawn once, as that steady state: allocated in the call, they land in fresh
        # pages whenever another op's malloc_trim ran (every call faults the whole K/V in:
        # 2,008 pages and 7-9 ms of CPU instead of about 1 ms for a 16,065-token cache of the
        # tiny Llama on the 2-core VM). The bytes moved are the same.
        shape = (b, k_new.shape[1], keys, k_new.shape[-1])
        k_out = torch.zeros(shape, dtype=q.dtype, device=q.device) if k_cache is not None else None
        v_out = torch.zeros(shape, dtype=q.dtype, device=q.device) if k_cache is not None else None

        def kv():
            if k_cache is None:  # prefill: the cache starts as a copy of the new K/V
                return k_new.contiguous(), v_new.contiguous()
            return (
                torch.cat([k_cache, k_new], dim=-2, out=k_out),
                torch.cat([v_cache, v_new], dim=-2, out=v_out),
            )

        def call():
            k, v = kv()
            return attention_sdpa(q, k, v)

        rep = q.shape[1] // k_new.shape[1]
        hs = self._rows(q.shape[1], 4)  # sampled query heads and their K/V heads
        kvs = [h // rep for h in hs]

        def reference():
            out = self._np(call()).reshape(b, s, q.shape[1], -1)
            k, v = kv()
            ref = _attention_reference(
                self._np(q[:, hs]), self._np(k[:, kvs]), self._np(v[:, kvs]), causal=s > 1
            )
            return out[:, :, hs], ref.transpose(0, 2, 1, 3)

        note = (
            "SDPA "
            + ("causal over the prompt" if s > 1 else f"over a KV cache of {keys} tokens")
            + ", cache append by concatenation (as transformers' DynamicCache)"
            + (" into reused buffers" if k_cache is not None else "")
        )
        return self._prepared(
            op, [call], reference, keys, 4, note, [q, k_new, v_new, k_cache, v_cache, k_out, v_out]
        )

    def _attention_eager(self, op: Op) -> PreparedTorchOp:
        from roofprof.models.llama_torch import (
            attention_pv,
            attention_scores,
            attention_softmax,
            causal_mask,
        )

        torch = self.torch
        m = self.model
        heads = m.num_heads
        if op.fn == "softmax":
            b = max(1, op.m // heads) if op.phase == "decode" else 1
            s = op.m // (b * heads)
            keys = op.n
            scores = self._randn((b, heads, s, keys), op)
            mask = causal_mask(s, keys, self._dtype(op), self.device) if s > 1 else None
            if mask is not None:
                scores = scores + mask

            def reference():
                out = self._np(attention_softmax(scores))
                x = self._np(scores)
                x = np.exp(x - x.max(-1, keepdims=True))
                return out[:, :2], (x / x.sum(-1, keepdims=True))[:, :2]

            return self._prepared(
                op,
                [lambda: attention_softmax(scores)],
                reference,
                keys,
                2,
                "softmax in float32 (eager)",
                [scores],
            )
        b, s, keys, q, k_new, v_new, k_cache, v_cache = self._attention_inputs(op)
        k = torch.cat([k_cache, k_new], dim=-2) if k_cache is not None else k_new.contiguous()
        v = torch.cat([v_cache, v_new], dim=-2) if v_cache is not None else v_new.contiguous()
        if op.fn == "qk_matmul":
            mask = causal_mask(s, keys, self._dtype(op), self.device) if s > 1 else None

            def call():
                return attention_scores(q, k, mask)

            def reference():
                out = self._np(call())
                rep = q.shape[1] // k.shape[1]
                kk = np.repeat(self._np(k), rep, axis=1)
                ref = self._np(q) @ kk.transpose(0, 1, 3, 2) * q.shape[-1] ** -0.5
                finite = np.isfinite(ref) & (np.abs(ref) < 1e30)
                if mask is not None:
                    ref = ref + self._np(mask)
                    finite = self._np(mask) == 0
                    finite = np.broadcast_to(finite, ref.shape)
                return np.where(finite, out, 0.0), np.where(finite, ref, 0.0)

            return self._prepared(
                op,
                [call],
                reference,
                op.k,
                3 + (mask is not None),
                "QKᵀ·scale + mask, K repeated for GQA (eager)",
                [q, k],
            )
        p = torch.softmax(self._randn((b, q.shape[1], s, keys), op).float(), dim=-1).to(
            self._dtype(op)
        )

        def call_pv():
            return attention_pv(p, v)

        def reference_pv():
            out = self._np(call_pv()).reshape(b, s, q.shape[1], -1).transpose(0, 2, 1, 3)
            rep = q.shape[1] // v.shape[1]
            ref = self._np(p) @ np.repeat(self._np(v), rep, axis=1)
            return out, ref

        return self._prepared(
            op, [call_pv], reference_pv, keys, 3, "P·V, V repeated for GQA (eager)", [p, v]
        )


#: Outputs at least this large get fresh pages before each timed call (see :func:`malloc_trimmer`).
FRESH_OUTPUT_BYTES = 1 << 20


def _output_bytes(op: Op, itemsize: int) -> int:
    """Bytes of one call's output (attention steps: every head's ``m × n`` block)."""
    heads = max(op.batch if op.kind == "attention" and op.fn != "softmax" else 1, 1)
    return op.m * op.n * heads * itemsize


def in_fresh_pages(op: Op, itemsize: int) -> bool:
    """Whether the CPU profile times ``op`` with its output in fresh pages: a non-GEMM op
    whose output (``itemsize`` bytes per element) is :data:`FRESH_OUTPUT_BYTES` or more."""
    return op.kind != "gemm" and _output_bytes(op, itemsize) >= FRESH_OUTPUT_BYTES


def fresh_page_bytes(ops: Sequence[Op], itemsize: int) -> int:
    """Bytes of output the CPU profile of ``ops`` places in fresh pages, per pass (each op's
    output × its count, for the ops :func:`in_fresh_pages` selects).

    >>> from roofprof.models import ops
    >>> from roofprof.workload import Scenario
    >>> w = ops(Scenario.of("llama-3.2-1b", "prefill", prompt_tokens=128, dtype="fp32"))
    >>> fresh_page_bytes(w.ops, 4) > 0, fresh_page_bytes([o for o in w.ops if o.kind == "gemm"], 4)
    (True, 0)
    """
    return sum(_output_bytes(op, itemsize) * op.count for op in ops if in_fresh_pages(op, itemsize))


def _attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """float64 attention ``[b,h,s,d]`` with GQA (K/V heads repeated) and an optional causal mask."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    s, t = scores.shape[-2:]
    if causal:
        allowed = np.arange(t)[None, :] <= (np.arange(s)[:, None] + (t - s))
        scores = np.where(allowed, scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    return (scores / scores.sum(-1, keepdims=True)) @ v
