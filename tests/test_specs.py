import json

import pytest

from roofprof.errors import ConfigError, UnknownNameError
from roofprof.roofline import Roofline
from roofprof.specs import list_gpus, list_models, load_gpu, load_model, match_gpu


def test_aliases_and_nvml_names_match():
    assert load_gpu("H100").id == "h100-sxm"
    assert load_gpu("h100-sxm5-80gb").id == "h100-sxm"
    assert match_gpu("NVIDIA H100 80GB HBM3").id == "h100-sxm"
    assert match_gpu("NVIDIA A100-SXM4-80GB").id == "a100-sxm-80gb"
    assert match_gpu("AMD EPYC") is None


def test_unknown_gpu_lists_closest_first():
    with pytest.raises(UnknownNameError) as err:
        load_gpu("h100-sxn")
    assert err.value.choices[0] == "h100-sxm"
    assert len(err.value.choices) == len(list_gpus())


def test_spec_roofline_has_every_dtype_and_hbm():
    r = Roofline.from_spec(load_gpu("h100-sxm"))
    assert r.compute_peak("bf16") == 989.4e12
    assert r.compute_peak("fp64") == 66.9e12  # FP64 tensor cores beat the CUDA cores
    assert r.memory_bandwidth() == 3.35e12
    with pytest.raises(ConfigError, match="fp8"):
        Roofline.from_spec(load_gpu("a100-sxm-80gb")).compute_peak("fp8")


def test_shipped_models():
    assert set(list_models()) >= {
        "llama-3.1-8b",
        "llama-3.1-70b",
        "llama-3.1-405b",
        "llama-3.2-1b",
        "llama-3.2-3b",
    }
    m70 = load_model("llama-3.1-70b")
    assert m70.head_dim == 128 and m70.num_kv_heads == 8
    assert load_model("llama-3.2-1b").tie_word_embeddings


def write(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


BASE = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 1000,
}


def test_any_hf_config_path(tmp_path):
    m = load_model(write(tmp_path, {**BASE, "num_key_value_heads": 2}))
    assert (m.head_dim, m.kv_size, m.num_layers) == (64, 128, 2)
    assert load_model(write(tmp_path, BASE)).num_kv_heads == 4  # MHA when absent


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "vocab_size"])
def test_missing_field_is_named(tmp_path, field):
    cfg = {k: v for k, v in BASE.items() if k != field}
    with pytest.raises(ConfigError, match=field):
        load_model(write(tmp_path, cfg))


def test_non_positive_size_is_named(tmp_path):
    with pytest.raises(ConfigError, match="intermediate_size"):
        load_model(write(tmp_path, {**BASE, "intermediate_size": 0}))
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        load_model(write(tmp_path, {**BASE, "num_key_value_heads": 3}))


def test_malformed_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(ConfigError, match="JSON"):
        load_model(str(p))


def test_unknown_model():
    with pytest.raises(UnknownNameError, match="llama-3.1-8b"):
        load_model("llama-9")


#: Mixtral 8x7B's config.json as published (mistralai/Mixtral-8x7B-v0.1): a sparse MoE, not a
#: dense Llama. Identical, field by field, to the copy that github.com/ai-dynamo/aiconfigurator
#: vendors (aic-core/src/aiconfigurator_core/model_configs/mistralai--Mixtral-8x7B-v0.1_config.json,
#: commit 095f58a51c4ca8e61b66ec108d86f223f8d559ce; read 2026-12-03).
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mixtral",
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "output_router_logits": False,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.36.0.dev0",
    "use_cache": True,
    "vocab_size": 32000,
}


#: A family roofprof does not model (Mixtral is modelled now: see tests/test_families_moe.py).
DBRX = {**MIXTRAL, "model_type": "dbrx", "architectures": ["DbrxForCausalLM"]}


def test_an_unknown_moe_config_is_refused_not_read_as_a_dense_llama(tmp_path):
    with pytest.raises(UnknownNameError) as err:
        load_model(write(tmp_path, DBRX))
    assert "dbrx" in str(err.value) and "DbrxForCausalLM" in str(err.value)
    assert "llama" in err.value.choices and "dbrx" not in err.value.choices


def test_an_unknown_moe_config_is_exit_2_on_the_command_line(tmp_path, capsys):
    from roofprof.cli import main

    code = main(["predict", "--model", write(tmp_path, DBRX), "--gpu", "h100-sxm"])
    err = capsys.readouterr().err
    assert code == 2 and "dbrx" in err and "llama" in err and "Traceback" not in err


def test_model_family_from_model_type_or_architectures(tmp_path):
    assert load_model(write(tmp_path, {**BASE, "model_type": "llama"})).family == "llama"
    assert (
        load_model(write(tmp_path, {**BASE, "architectures": ["LlamaForCausalLM"]})).family
        == "llama"
    )
    assert (
        load_model(write(tmp_path, BASE)).family == "llama"
    )  # sizes only: read as a Llama, as before
    assert (
        load_model(write(tmp_path, {**BASE, "architectures": ["MistralForCausalLM"]})).family
        == "mistral"
    )
    with pytest.raises(UnknownNameError, match="GemmaForCausalLM"):
        load_model(write(tmp_path, {**BASE, "architectures": ["GemmaForCausalLM"]}))


def test_rope_and_norm_fields_are_kept_and_the_spec_stays_hashable(tmp_path):
    m = load_model("llama-3.1-8b")
    assert (m.rope_theta, m.rms_norm_eps) == (500000.0, 1e-05)
    assert m.rope_scaling_dict == {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    }
    assert hash(m) == hash(load_model("llama-3.1-8b"))
    bare = load_model(write(tmp_path, BASE))
    assert (bare.rope_theta, bare.rope_scaling, bare.rms_norm_eps) == (
        10000.0,
        None,
        1e-6,
    )  # transformers' defaults
