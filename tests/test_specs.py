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
    assert set(list_models()) >= {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b"}
    m70 = load_model("llama-3.1-70b")
    assert m70.head_dim == 128 and m70.num_kv_heads == 8
    assert load_model("llama-3.2-1b").tie_word_embeddings


def write(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


BASE = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "vocab_size": 1000}


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
