"""Phi-3 in plain torch (fused ``qkv_proj`` and ``gate_up_proj``), its transformers config, its
preparer.

:class:`TorchPhi3` is the architecture of transformers' ``Phi3ForCausalLM``: Llama's, with
q/k/v as one GEMM whose output is split, and gate/up as one GEMM whose output halves feed
:func:`chunk_silu_mul` (``up · silu(gate)``), the function :data:`PREPARERS` times for the
``chunk_silu_mul`` ops.

>>> import dataclasses, torch
>>> from roofprof.specs import load_model
>>> small = dataclasses.replace(load_model("phi-3-mini"), num_layers=2, hidden_size=64,
...                             intermediate_size=128, num_heads=4, num_kv_heads=4, head_dim=16,
...                             vocab_size=100)
>>> model = build(small, torch.float32, "cpu", "fused")
>>> tuple(model(torch.tensor([[1, 2, 3]]), new_cache(small)).shape)
(1, 1, 100)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from roofprof.models.llama_torch import KVCache, LlamaLayer, TorchLlama
from roofprof.models.llama_torch import hf_config as llama_hf_config
from roofprof.specs import ModelSpec

__all__ = [
    "PREPARERS",
    "Phi3Layer",
    "TorchPhi3",
    "build",
    "chunk_silu_mul",
    "hf_config",
    "new_cache",
]


def chunk_silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """Phi-3's MLP activation: ``gate, up = gate_up.chunk(2, -1)``; ``up · silu(gate)`` (two
    kernels)."""
    gate, up = gate_up.chunk(2, dim=-1)
    return up * F.silu(gate)


class Phi3Layer(LlamaLayer):
    """A Phi-3 decoder layer: ``qkv_proj`` and ``gate_up_proj`` in place of the separate GEMMs."""

    def __init__(self, m: ModelSpec, dtype, device):
        nn.Module.__init__(self)
        kw = dict(bias=False, dtype=dtype, device=device)
        h = m.hidden_size
        self.m = m
        self.attn_norm = nn.Parameter(torch.ones(h, dtype=dtype, device=device))
        self.mlp_norm = nn.Parameter(torch.ones(h, dtype=dtype, device=device))
        self.qkv_proj = nn.Linear(h, m.q_size + 2 * m.kv_size, **kw)
        self.o_proj = nn.Linear(m.q_size, h, **kw)
        self.gate_up_proj = nn.Linear(h, 2 * m.intermediate_size, **kw)
        self.down_proj = nn.Linear(m.intermediate_size, h, **kw)

    def qkv(self, hs, eps: float):
        b, s, _ = hs.shape
        m, d = self.m, self.m.head_dim
        qkv = self.qkv_proj(hs)
        q = qkv[..., : m.q_size].view(b, s, -1, d).transpose(1, 2)
        k = qkv[..., m.q_size : m.q_size + m.kv_size].view(b, s, -1, d).transpose(1, 2)
        v = qkv[..., m.q_size + m.kv_size :].view(b, s, -1, d).transpose(1, 2)
        return q, k, v

    def mlp(self, hs):
        return self.down_proj(chunk_silu_mul(self.gate_up_proj(hs)))


class TorchPhi3(TorchLlama):
    """Phi-3 in plain torch: ``forward(input_ids, cache)`` → last-token logits."""

    layer_class = Phi3Layer


def new_cache(spec: ModelSpec) -> KVCache:
    """An empty KV cache (``sliding_window`` caps what each layer keeps)."""
    return KVCache()


def build(spec: ModelSpec, dtype: torch.dtype, device: str, attention: str) -> nn.Module:
    """The plain-torch Phi-3 model of ``spec``, random weights."""
    return TorchPhi3(
        spec,
        dtype=dtype,
        device=device,
        attention=attention,
        rope_theta=spec.rope_theta,
        rope_scaling=spec.rope_scaling_dict,
        eps=spec.rms_norm_eps,
    ).eval()


def hf_config(spec: ModelSpec) -> dict[str, Any]:
    """Keyword arguments of ``Phi3Config`` for ``spec`` (Llama's, less the fields Phi-3 lacks)."""
    kw = llama_hf_config(spec)
    for key in ("head_dim", "attention_bias", "use_sliding_window"):
        kw.pop(key, None)
    # its defaults' token ids (pad 32000) lie outside a scaled-down vocabulary
    return {**kw, "pad_token_id": None, "bos_token_id": None, "eos_token_id": None}


def _prepare_chunk_silu_mul(ops, op):
    x = ops.randn((op.m, 2 * op.n), op)
    rows = ops.sample_rows(op.m)

    def reference():
        import numpy as np

        xr = ops.to_numpy(x[rows])
        gate, up = xr[:, : op.n], xr[:, op.n :]
        return ops.to_numpy(chunk_silu_mul(x)[rows]), up * gate / (1 + np.exp(-gate))

    return ops.prepared(
        op,
        [lambda: chunk_silu_mul(x)],
        reference,
        1,
        2,
        "gate_up.chunk(2); up * F.silu(gate) (strided halves)",
        [x],
    )


#: ``Op.fn`` -> preparer for :class:`roofprof.profiling.torch_ops.TorchOps`: the fused-MLP
#: activation.
PREPARERS = {"chunk_silu_mul": _prepare_chunk_silu_mul}
