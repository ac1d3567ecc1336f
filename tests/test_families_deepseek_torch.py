"""DeepSeek-V3 measurable: the plain-torch MLA model, its cache, its op preparers, the CLI verbs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from roofprof.models import MEASURABLE, ops  # noqa: E402
from roofprof.models import deepseek_v3_torch as ds  # noqa: E402
from roofprof.models import mla_torch as mla  # noqa: E402
from roofprof.workload import Scenario  # noqa: E402

TINY = ds.tiny_spec()
#: the tiny spec as an HF config.json (the fields the deepseek_v3 family reads)
TINY_CONFIG = {
    "model_type": "deepseek_v3",
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 96,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "n_group": 4,
    "topk_group": 2,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "vocab_size": 100,
    "tie_word_embeddings": False,
    "max_position_embeddings": 256,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
}


@pytest.fixture
def tiny_ds_config(tmp_path):
    path = tmp_path / "deepseek-tiny.json"
    path.write_text(json.dumps(TINY_CONFIG))
    return path


def _prepare_all(spec, phase, batch=1):
    from roofprof.profiling.torch_ops import TorchOps

    impl = TorchOps(spec)
    for op in ops(Scenario(spec, phase, batch, 16, 16, "fp32")).ops:
        assert impl.supports(op) is None, op.name
        yield op, impl.prepare(op, np.random.default_rng(0))


@pytest.mark.parametrize("batch", [1, 2])
def test_deepseek_is_measurable_and_every_op_has_a_checked_torch_implementation(batch):
    assert "deepseek_v3" in MEASURABLE
    for phase in ("prefill", "decode"):
        for op, prepared in _prepare_all(TINY, phase, batch):
            prepared.run()
            assert prepared.check().ok, (phase, op.name)
            prepared.release()


def _load_hf_weights(mine, hf):
    sd = hf.state_dict()
    with torch.no_grad():
        mine.embed.weight.copy_(sd["model.embed_tokens.weight"])
        mine.norm.copy_(sd["model.norm.weight"])
        mine.lm_head.weight.copy_(sd["lm_head.weight"])
        for i, layer in enumerate(mine.layers):
            p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
            layer.attn_norm.copy_(sd[p + "input_layernorm.weight"])
            layer.mlp_norm.copy_(sd[p + "post_attention_layernorm.weight"])
            for mine_name, hf_name in (
                ("q_a_proj", "q_a_proj"),
                ("q_b_proj", "q_b_proj"),
                ("kv_a_proj", "kv_a_proj_with_mqa"),
                ("kv_b_proj", "kv_b_proj"),
                ("o_proj", "o_proj"),
            ):
                getattr(layer, mine_name).weight.copy_(sd[a + hf_name + ".weight"])
            layer.q_a_norm.copy_(sd[a + "q_a_layernorm.weight"])
            layer.kv_a_norm.copy_(sd[a + "kv_a_layernorm.weight"])
            m = p + "mlp."
            if layer.is_moe:
                layer.router.copy_(sd[m + "gate.weight"])
                layer.router_bias.copy_(sd[m + "gate.e_score_correction_bias"])
                layer.gate_up.copy_(sd[m + "experts.gate_up_proj"])
                layer.down.copy_(sd[m + "experts.down_proj"])
                m += "shared_experts."
            for n in ("gate_proj", "up_proj", "down_proj"):
                getattr(layer, n).weight.copy_(sd[m + n + ".weight"])
    mine.absorb_()


def test_plain_torch_deepseek_matches_transformers_prefill_and_absorbed_decode():
    """Same weights: the counted form (decompressed prefill, weight-absorbed decode over the
    latent cache) gives transformers' logits, grouped routing and score-correction bias included."""
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    hf = transformers.DeepseekV3ForCausalLM(
        transformers.DeepseekV3Config(**ds.hf_config(TINY))
    ).eval()
    assert hf.config._experts_implementation == "eager"
    with torch.no_grad():
        for (
            name,
            p,
        ) in hf.named_parameters():  # transformers starts the router at zero: give it values
            p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0, 0.2)
        for name, b in hf.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0, 0.05)
    mine = ds.build(TINY, torch.float32, "cpu", "fused")
    _load_hf_weights(mine, hf)
    ids = torch.tensor([[1, 5, 7, 9, 11, 13]])
    cache = ds.new_cache(TINY)
    with torch.no_grad():
        out = hf(ids, use_cache=True)
        assert torch.allclose(mine(ids, cache), out.logits[:, -1:], atol=1e-4)
        hf_cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        for token in (3, 4):
            nxt = torch.tensor([[token]])
            expected = hf(nxt, cache=hf_cache, use_cache=True).logits[:, -1:]
            assert torch.allclose(mine(nxt, cache), expected, atol=1e-4)
    assert cache.length == 8


def test_mla_cache_holds_only_latent_and_rope_key():
    model = ds.build(TINY, torch.float32, "cpu", "fused")
    cache = ds.new_cache(TINY)
    model(torch.tensor([[1, 2, 3, 4, 5]]), cache)
    model(torch.tensor([[6]]), cache)
    per_token = (TINY.mla.kv_lora_rank + TINY.mla.qk_rope_head_dim) * TINY.num_layers * 4
    assert cache.nbytes == 6 * per_token == 6 * TINY.kv_bytes_per_token("fp32")
    assert {tuple(e.shape) for e in cache.entries} == {(1, 6, 16 + 8)}


_PREFILL, _DECODE = ds.mla_prefill_attention, ds.mla_decode  # the originals (monkeypatched below)


def _broken_rope(q, k, cos, sin):
    return q, k  # no rotation


def _broken_prefill(q_nope, q_rope, kv, k_rope, scale):
    return _PREFILL(q_nope, q_rope, kv, k_rope, scale * 2)


def _broken_head_matmul(x, w):
    return torch.bmm(x.transpose(0, 1), w.flip(0)).transpose(0, 1)  # heads' weights swapped


def _broken_decode(q_latent, q_rope, cache, scale):
    return _DECODE(q_latent, torch.zeros_like(q_rope), cache, scale)  # RoPE part dropped


def _broken_route(logits, bias, k, groups, scale=ds.ROUTED_SCALING_FACTOR):
    weights, index = torch.topk(
        torch.softmax(logits.float(), -1), k, dim=-1
    )  # Mixtral's, not DeepSeek's
    return weights.to(logits.dtype), index


@pytest.mark.parametrize(
    ("module", "fn", "op_name", "phase", "broken"),
    [
        (mla, "mla_rope", "rope", "decode", _broken_rope),
        (mla, "mla_prefill_attention", "attention", "prefill", _broken_prefill),
        (mla, "head_matmul", "q_absorb", "decode", _broken_head_matmul),
        (mla, "head_matmul", "v_absorb", "decode", _broken_head_matmul),
        (mla, "mla_decode", "latent_attention", "decode", _broken_decode),
        (ds, "deepseek_route", "route", "decode", _broken_route),
    ],
)
def test_each_preparer_check_catches_a_wrong_implementation(
    monkeypatch, module, fn, op_name, phase, broken
):
    monkeypatch.setattr(module, fn, broken)  # where the preparer looks the function up
    for op, prepared in _prepare_all(TINY, phase, batch=2):
        if op.name == op_name:
            prepared.run()
            assert not prepared.check().ok
            return
    raise AssertionError(f"no op {op_name}")


def test_validate_auto_runs_the_counted_form_and_says_why():
    from roofprof.api import validate

    auto = validate(
        TINY, device="cpu", prompt_tokens=8, decode_steps=1, warmup_steps=0, prefill_repeats=1
    )
    assert auto.backend.startswith("plain torch") and "TorchDeepseekV3" in auto.backend
    assert any("counted MLA form" in n for n in auto.warnings)
    assert "counted MLA form" in " ".join(auto.to_dict()["warnings"])


def test_validate_hf_backend_runs_transformers_and_states_the_difference():
    from roofprof.api import validate

    pytest.importorskip("transformers")
    hf = validate(
        TINY,
        device="cpu",
        backend="hf",
        prompt_tokens=8,
        decode_steps=1,
        warmup_steps=0,
        prefill_repeats=1,
    )
    assert "DeepseekV3ForCausalLM" in hf.backend
    assert any("weight-absorbed engine form" in n for n in hf.warnings)


def test_plain_torch_refuses_experts_that_do_not_split_into_groups():
    from roofprof.errors import ConfigError
    from roofprof.models.moe_config import MoeSpec

    spec = dataclasses.replace(TINY, moe=dataclasses.replace(TINY.moe, groups=(3, 1)))
    assert isinstance(spec.moe, MoeSpec)
    with pytest.raises(ConfigError, match="n_group 3"):
        ds.build(spec, torch.float32, "cpu", "fused")


def test_cli_profile_runs_for_deepseek(capsys, tiny_ds_config):
    from roofprof.cli import main

    assert (
        main(
            [
                "profile",
                "--model",
                str(tiny_ds_config),
                "--device",
                "cpu",
                "--phase",
                "both",
                "--prompt",
                "8",
                "--roofline",
                "none",
                "--impl",
                "torch",
                "--budget",
                "0.001",
                "--format",
                "json",
            ]
        )
        == 0
    )
    profiles = json.loads(capsys.readouterr().out)["profiles"]
    names = {op["name"] for p in profiles for op in p["ops"]}
    assert {"q_absorb", "latent_attention", "v_absorb", "kv_b_proj", "route"} <= names


def test_cli_predict_measured_runs_for_deepseek(capsys, tiny_ds_config):
    import warnings

    import roofprof
    from roofprof.cli import main
    from roofprof.profiling.measured import measured_estimator

    model = str(tiny_ds_config)
    # measure the shapes once with a tiny budget: the CLI then finds them in the cache
    warm = measured_estimator(model, device="cpu", dtype="fp32", roofline="none", budget_s=0.001)
    roofprof.predict(model, estimator=warm, prompt_tokens=8, dtype="fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            main(
                [
                    "predict",
                    "--model",
                    model,
                    "--estimator",
                    "measured",
                    "--device",
                    "cpu",
                    "--dtype",
                    "fp32",
                    "--prompt",
                    "8",
                    "--roofline",
                    "none",
                    "--format",
                    "json",
                ]
            )
            == 0
        )
    d = json.loads(capsys.readouterr().out)
    assert (
        d["estimator"] == "measured"
        and d["decode"]["seconds_per_token"] > 0
        and d["prefill"]["seconds"] > 0
    )


def test_cli_validate_runs_for_deepseek(capsys, tiny_ds_config, tmp_path):
    from roofprof.cli import main

    out = tmp_path / "v.json"
    assert (
        main(
            [
                "validate",
                "--model",
                str(tiny_ds_config),
                "--device",
                "cpu",
                "--prompt",
                "8",
                "--steps",
                "1",
                "--repeats",
                "1",
                "--estimators",
                "measured",
                "--roofline",
                "none",
                "--budget",
                "0.001",
                "--format",
                "json",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    v = json.loads(out.read_text())
    assert "plain torch" in v["backend"] and any("counted MLA form" in n for n in v["warnings"])
    assert (
        v["comparison"][0]["estimator"] == "measured"
        and v["comparison"][0]["decode_residual"] is not None
    )
