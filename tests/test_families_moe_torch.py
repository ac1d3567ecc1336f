"""The measurable MoE family (Mixtral): plain-torch model, op preparers, transformers class."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conftest import check_every_torch_op  # noqa: E402

from roofprof.models import MEASURABLE  # noqa: E402
from roofprof.models.llama_torch import KVCache  # noqa: E402
from roofprof.models.moe_config import MoeSpec  # noqa: E402
from roofprof.models.moe_torch import moe_forward  # noqa: E402
from roofprof.specs import ModelSpec  # noqa: E402
from roofprof.workload import Scenario  # noqa: E402

TINY = ModelSpec(
    "tiny-moe",
    64,
    32,
    2,
    4,
    2,
    16,
    100,
    False,
    256,
    family="mixtral",
    rope_theta=1e6,
    rms_norm_eps=1e-5,
    moe=MoeSpec(4, 2, 32),
)


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_moe_family_is_measurable_and_every_op_has_a_checked_torch_implementation(family):
    import dataclasses

    spec = dataclasses.replace(TINY, family=family, qk_norm=family == "qwen3_moe")
    assert family in MEASURABLE
    checked = check_every_torch_op(
        spec, [Scenario(spec, phase, 1, 16, 16, "fp32") for phase in ("prefill", "decode")]
    )
    assert "lm_head" in checked


def test_moe_forward_equals_a_dense_reference():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 16, generator=gen)
    router, gate_up, down = (
        torch.randn(4, 16, generator=gen),
        torch.randn(4, 16, 16, generator=gen),
        torch.randn(4, 16, 8, generator=gen),
    )
    probs = torch.softmax(x @ router.T, dim=-1)
    w, idx = probs.topk(2, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    ref = torch.zeros_like(x)
    for t in range(6):
        for j in range(2):
            e = int(idx[t, j])
            g, u = (x[t] @ gate_up[e].T).chunk(2)
            ref[t] += w[t, j] * ((torch.nn.functional.silu(g) * u) @ down[e].T)
    assert torch.allclose(moe_forward(x, router, gate_up, down, 2), ref, atol=1e-5)


def test_plain_torch_mixtral_matches_transformers():
    pytest.importorskip("transformers")
    import transformers

    from roofprof.models import mixtral_torch

    hf = transformers.MixtralForCausalLM(
        transformers.MixtralConfig(**mixtral_torch.hf_config(TINY))
    ).eval()
    assert hf.config._experts_implementation == "eager"
    mine = mixtral_torch.build(TINY, torch.float32, "cpu", "fused")
    sd = hf.state_dict()
    with torch.no_grad():
        mine.embed.weight.copy_(sd["model.embed_tokens.weight"])
        mine.norm.copy_(sd["model.norm.weight"])
        mine.lm_head.weight.copy_(sd["lm_head.weight"])
        for i, layer in enumerate(mine.layers):
            p = f"model.layers.{i}."
            layer.attn_norm.copy_(sd[p + "input_layernorm.weight"])
            layer.mlp_norm.copy_(sd[p + "post_attention_layernorm.weight"])
            for n in "qkvo":
                getattr(layer, f"{n}_proj").weight.copy_(sd[p + f"self_attn.{n}_proj.weight"])
            layer.router.copy_(sd[p + "mlp.gate.weight"])
            layer.gate_up.copy_(sd[p + "mlp.experts.gate_up_proj"])
            layer.down.copy_(sd[p + "mlp.experts.down_proj"])
    ids = torch.tensor([[1, 5, 7, 9, 11]])
    with torch.no_grad():
        expected = hf(ids).logits[:, -1:]
    cache = mixtral_torch.new_cache(TINY)
    assert isinstance(cache, KVCache)
    assert torch.allclose(mine(ids, cache), expected, atol=1e-5)
    step = mine(torch.tensor([[3]]), cache)  # decode with the cache
    assert tuple(step.shape) == (1, 1, 100) and cache.length == 6


def test_plain_torch_qwen3_moe_matches_transformers():
    pytest.importorskip("transformers")
    import dataclasses

    import transformers

    from roofprof.models import qwen3_moe_torch

    spec = dataclasses.replace(TINY, family="qwen3_moe", qk_norm=True, rms_norm_eps=1e-6)
    assert "qwen3_moe" in MEASURABLE
    hf = transformers.Qwen3MoeForCausalLM(
        transformers.Qwen3MoeConfig(**qwen3_moe_torch.hf_config(spec))
    ).eval()
    mine = qwen3_moe_torch.build(spec, torch.float32, "cpu", "fused")
    sd = hf.state_dict()
    with torch.no_grad():
        for p in hf.parameters():  # the router starts at zero in transformers: give it values
            p.normal_(0, 0.2)
        sd = hf.state_dict()
        mine.embed.weight.copy_(sd["model.embed_tokens.weight"])
        mine.norm.copy_(sd["model.norm.weight"])
        mine.lm_head.weight.copy_(sd["lm_head.weight"])
        for i, layer in enumerate(mine.layers):
            p = f"model.layers.{i}."
            layer.attn_norm.copy_(sd[p + "input_layernorm.weight"])
            layer.mlp_norm.copy_(sd[p + "post_attention_layernorm.weight"])
            layer.q_norm.copy_(sd[p + "self_attn.q_norm.weight"])
            layer.k_norm.copy_(sd[p + "self_attn.k_norm.weight"])
            for n in "qkvo":
                getattr(layer, f"{n}_proj").weight.copy_(sd[p + f"self_attn.{n}_proj.weight"])
            layer.router.copy_(sd[p + "mlp.gate.weight"])
            layer.gate_up.copy_(sd[p + "mlp.experts.gate_up_proj"])
            layer.down.copy_(sd[p + "mlp.experts.down_proj"])
        ids = torch.tensor([[1, 5, 7, 9, 11]])
        expected = hf(ids).logits[:, -1:]
    assert torch.allclose(mine(ids, qwen3_moe_torch.new_cache(spec)), expected, atol=1e-4)
