"""Dense families beyond Llama: configs, parameter counts, op lists, torch side."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import check_every_torch_op

from roofprof.errors import ConfigError
from roofprof.models import MEASURABLE, ops
from roofprof.models.families import TORCH_SIDES, fields_read
from roofprof.specs import load_model
from roofprof.workload import Counting, Scenario

#: Published totals: Hugging Face safetensors totals (gemma-2-9b 9,241,705,984; phi-3-mini
#: 3,821,079,552; the Qwen and Mistral counts as in data/SOURCES.md) and, for Gemma 3 12B, whose
#: published total 12,187,325,040 includes its SigLIP vision tower, the language model alone
#: as llama.cpp counts its GGUF (n-params 11,766,034,176).
PUBLISHED = {
    "gemma-2-9b": 9_241_705_984,
    "gemma-3-12b": 11_766_034_176,
    "phi-3-mini": 3_821_079_552,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-7b": 7_615_616_512,
    "mistral-7b-v0.3": 7_248_023_552,
    "qwen3-8b": 8_190_735_360,
}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_parameter_counts_match_published(model):
    assert load_model(model).param_count() == pytest.approx(PUBLISHED[model], rel=0.01)


def test_published_config_values():
    g2, g3, phi = load_model("gemma-2-9b"), load_model("gemma-3-12b"), load_model("phi-3-mini")
    assert (
        g2.family,
        g2.hidden_size,
        g2.num_layers,
        g2.head_dim,
        g2.sliding_window,
        g2.tie_word_embeddings,
    ) == ("gemma2", 3584, 42, 256, 4096, True)
    assert g2.gemma.local_layers[:4] == (True, False, True, False) and g2.num_local_layers == 21
    assert (g2.gemma.attn_logit_softcapping, g2.gemma.final_logit_softcapping) == (50.0, 30.0)
    assert (
        g3.family,
        g3.hidden_size,
        g3.num_layers,
        g3.vocab_size,
        g3.sliding_window,
        g3.qk_norm,
    ) == ("gemma3", 3840, 48, 262208, 1024, True)
    assert (
        g3.num_local_layers == 40 and g3.gemma.rope_local_theta == 10000.0 and g3.rope_theta == 1e6
    )
    assert g3.rope_scaling_dict == {"factor": 8.0, "rope_type": "linear"}
    assert (
        phi.family,
        phi.hidden_size,
        phi.num_heads,
        phi.num_kv_heads,
        phi.vocab_size,
        phi.sliding_window,
    ) == ("phi3", 3072, 32, 32, 32064, 2047)


def test_every_dense_family_is_measurable():
    assert set(MEASURABLE) >= {"llama", "qwen2", "mistral", "qwen3", "gemma2", "gemma3", "phi3"}
    assert all(name in TORCH_SIDES for name in MEASURABLE)


def test_gemma_kv_cache_caps_local_layers():
    m = load_model("gemma-2-9b")
    w = ops(Scenario.of(m, "decode", context_tokens=8191, dtype="bf16"))
    row = 2 * m.kv_size * 2  # K and V, bf16, one layer
    assert w.kv_bytes == pytest.approx((21 * 8192 + 21 * 4096) * row)
    assert m.kv_tokens(8192) == (8192 + 4096) // 2
    g3 = load_model("gemma-3-12b")
    assert g3.kv_tokens(100) == 100 and g3.kv_tokens(4096) == pytest.approx(
        (8 * 4096 + 40 * 1024) / 48
    )


def test_gemma2_attention_is_eager_with_softcap():
    w = ops(Scenario.of("gemma-2-9b", "prefill", prompt_tokens=64, dtype="bf16"))
    names = [op.name for op in w.ops]
    assert (
        "attention" not in names and names.count("attn_softcap") == 1 and "logit_softcap" in names
    )
    assert names.index("attn_scores") < names.index("attn_softcap") < names.index("attn_softmax")


def test_gemma3_has_head_norms_and_local_attention():
    w = ops(Scenario.of("gemma-3-12b", "decode", context_tokens=5000, dtype="bf16"))
    by = {op.name: op for op in w.ops}
    assert by["attention"].n == 5001 and by["attention"].count == 8
    assert by["attention_local"].n == 1024 and by["attention_local"].count == 40
    assert by["q_norm"].fn == "gemma_head_rmsnorm" and by["post_mlp_norm"].fn == "gemma_rmsnorm"
    assert by["gelu_mul"].fn == "gelu_tanh_mul" and "logit_softcap" not in by


def test_phi3_fused_projections_weigh_as_separate_ones():
    phi = load_model("phi-3-mini")
    w = ops(Scenario.of(phi, "decode", context_tokens=10, dtype="bf16", convention="rule-of-thumb"))
    assert {op.name for op in w.ops} >= {"qkv_proj", "gate_up_proj"}
    # the fused GEMMs read exactly the layer's weights: embedding + layers + head
    assert w.weight_bytes == pytest.approx(
        2 * (phi.param_count() - phi.num_layers * 2 * phi.hidden_size - phi.hidden_size), rel=1e-6
    )


def _write(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


GEMMA2 = {
    "model_type": "gemma2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 100,
    "query_pre_attn_scalar": 16,
    "sliding_window": 8,
    "attn_logit_softcapping": 50.0,
}


@pytest.mark.parametrize(
    "change, field",
    [
        ({"query_pre_attn_scalar": None}, "query_pre_attn_scalar"),
        ({"query_pre_attn_scalar": -1}, "query_pre_attn_scalar"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"attn_logit_softcapping": -5}, "attn_logit_softcapping"),
        ({"hidden_activation": "relu"}, "hidden_activation"),
        ({"attention_bias": True}, "attention_bias"),
        ({"layer_types": ["full_attention"]}, "layer_types"),
    ],
)
def test_gemma_bad_fields_name_the_field(tmp_path, change, field):
    cfg = {**GEMMA2, **change}
    if change.get("query_pre_attn_scalar", 1) is None:
        del cfg["query_pre_attn_scalar"]
    with pytest.raises(ConfigError, match=field):
        load_model(_write(tmp_path, cfg))


@pytest.mark.parametrize(
    "cfg, words",
    [
        ({"model_type": "qwen2", "head_dim": 32}, "contradicts hidden_size"),
        ({"model_type": "phi3", "head_dim": 8}, "contradicts hidden_size"),
        ({"model_type": "phi3", "partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ({"model_type": "llama", "hidden_act": "gelu"}, "hidden_act"),
        ({"model_type": "mistral", "mlp_bias": True}, "mlp_bias"),
    ],
)
def test_contradictory_or_unmodelled_fields_refused(tmp_path, cfg, words):
    base = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
    }
    with pytest.raises(ConfigError, match=words):
        load_model(_write(tmp_path, {**base, **cfg}))


def test_ignored_fields_listed(tmp_path):
    m = load_model(
        _write(tmp_path, {**GEMMA2, "bos_token_id": 2, "cache_implementation": "hybrid"})
    )
    assert m.ignored_fields == ("bos_token_id", "cache_implementation")
    assert "query_pre_attn_scalar" in fields_read(
        "gemma2"
    ) and "query_pre_attn_scalar" not in fields_read("llama")


def test_predict_json_lists_ignored_fields(capsys):
    from roofprof.cli import main

    code = main(["predict", "--model", "phi-3-mini", "--gpu", "h100-sxm", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    out = out[0] if isinstance(out, list) else out
    assert code in (0, None) and out["counting_config"]["family"] == "phi3"
    assert "embd_pdrop" in out["counting_config"]["ignored_fields"]


# --------------------------------------------------------------------------- torch side

torch = pytest.importorskip("torch")


def _tiny(model_id: str):
    m = load_model(model_id)
    m = dataclasses.replace(
        m,
        num_layers=2,
        hidden_size=64,
        intermediate_size=96,
        num_heads=4,
        num_kv_heads=2 if m.family != "phi3" else 4,
        head_dim=16,
        vocab_size=128,
        sliding_window=None if m.sliding_window is None else 6,
    )
    if m.gemma is not None:
        m = dataclasses.replace(
            m,
            gemma=dataclasses.replace(
                m.gemma, local_layers=(True, False), query_pre_attn_scalar=16.0
            ),
        )
    return m


DENSE = ["qwen2.5-0.5b", "qwen3-8b", "mistral-7b-v0.3", "gemma-2-9b", "gemma-3-12b", "phi-3-mini"]


@pytest.mark.parametrize("model_id", DENSE)
@pytest.mark.parametrize("attention", ["fused", "unfused"])
def test_every_op_has_a_checked_torch_implementation(model_id, attention):
    spec = _tiny(model_id)
    checked = check_every_torch_op(
        spec,
        [
            Scenario(spec, phase, 1, 8, ctx, "fp32", Counting(attention=attention))
            for phase, ctx in (("prefill", None), ("decode", 9))
        ],
        cache_bytes=1 << 16,
    )
    assert "lm_head" in checked


@pytest.mark.parametrize("model_id", DENSE)
def test_hf_model_parameters_equal_the_spec_count(model_id):
    pytest.importorskip("transformers")
    import transformers

    from roofprof.models import families
    from roofprof.models.gemma_torch import hf_config as gemma_config  # noqa: F401  (import check)

    spec = _tiny(model_id)
    side = families.torch_side(spec.family)
    import importlib

    module = importlib.import_module(side.module)
    config = getattr(transformers, side.hf_config_class)(**module.hf_config(spec))
    with torch.device("meta"):
        model = getattr(transformers, side.hf_class)(config)
    total = sum(p.numel() for p in model.parameters())  # tied weights counted once
    assert total == spec.param_count()
    plain = module.build(spec, torch.float32, "cpu", "fused")
    assert sum(p.numel() for p in plain.parameters()) == spec.param_count()


@pytest.mark.parametrize("model_id", DENSE)
@pytest.mark.parametrize("backend", ["hf", "torch"])
def test_real_models_run_prefill_and_decode(model_id, backend):
    if backend == "hf":
        pytest.importorskip("transformers")
    from roofprof.validation.real_model import Runner, build_hf_model, build_torch_model

    spec = _tiny(model_id)
    net = (build_hf_model if backend == "hf" else build_torch_model)(spec, "fp32", "cpu", "fused")
    runner = Runner(net, backend)
    with torch.inference_mode():
        logits, cache = runner.prefill(torch.randint(0, 128, (1, 10)))
        for _ in range(4):  # past the window of 6 tokens
            logits = runner.step(logits[:, -1:].argmax(-1), cache)
    assert tuple(logits.shape) == (1, 1, 128) and bool(torch.isfinite(logits).all())


#: transformers' parameter names -> the plain-torch model's, per family (after "model." and
#: "self_attn."/"mlp." are dropped).
_NORMS = {"input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm"}
_GEMMA_NORMS = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "post_attn_norm",
    "pre_feedforward_layernorm": "mlp_norm",
    "post_feedforward_layernorm": "post_mlp_norm",
}


def _plain_name(name: str, family: str) -> str:
    parts = [p for p in name.split(".") if p not in ("model", "self_attn", "mlp")]
    norms = _GEMMA_NORMS if family.startswith("gemma") else _NORMS
    parts = [norms.get(p, p) for p in parts]
    if parts[0] == "embed_tokens":
        parts[0] = "embed"
    if parts[-1] == "weight" and (parts[-2].endswith("norm")):
        parts = parts[:-1]  # the plain model's norms are bare parameters
    return ".".join(parts)


@pytest.mark.parametrize("model_id", DENSE)
@pytest.mark.parametrize("attention", ["fused", "unfused"])
def test_plain_torch_model_computes_what_transformers_does(model_id, attention):
    """Same weights into both models: the same logits, in prefill past the window and in decode."""
    pytest.importorskip("transformers")
    from roofprof.validation.real_model import Runner, build_hf_model, build_torch_model

    spec = _tiny(model_id)
    hf = build_hf_model(spec, "fp32", "cpu", attention)
    plain = build_torch_model(spec, "fp32", "cpu", attention)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        params = dict(plain.named_parameters())
        for name, p in hf.named_parameters():
            if name == "lm_head.weight" and spec.tie_word_embeddings:
                continue
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if "norm" in name else 0.1))
            params[_plain_name(name, spec.family)].copy_(p)
        assert len(params) == len([n for n, _ in hf.named_parameters()])
    ids = torch.randint(0, 128, (1, 10), generator=gen)
    outs = []
    for net, backend in ((hf, "hf"), (plain, "torch")):
        runner = Runner(net, backend)
        with torch.inference_mode():
            logits, cache = runner.prefill(ids)
            seq = [logits[:, -1]]
            for token in (5, 17, 3):
                seq.append(runner.step(torch.tensor([[token]]), cache)[:, -1])
        outs.append(torch.stack(seq))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("model_id", ["gemma-2-9b", "gemma-3-12b", "phi-3-mini"])
def test_predict_is_fast_for_new_families(model_id):
    import time

    from roofprof import predict

    t0 = time.perf_counter()
    p = predict(model_id, "h100-sxm", prompt_tokens=512, dtype="bf16")
    assert time.perf_counter() - t0 < 1.0 and p.decode.seconds > 0
