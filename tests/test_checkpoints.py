"""Quantized checkpoints: quantization_config → bits per weight, safetensors headers → bytes.

The quantization configs are the ``quantization_config`` blocks of published checkpoints
(``tests/fixtures/checkpoints/SOURCES.md``); the model folders hold real safetensors files
written by the ``safetensors`` library, with each method's tensor layout.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import roofprof
from roofprof.checkpoints.quantization import scheme_of
from roofprof.checkpoints.tensors import read_safetensors_header
from roofprof.errors import ConfigError, UnknownNameError
from roofprof.specs import load_model
from roofprof.workload import Scenario

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
PUBLISHED = json.loads((FIXTURES / "quantization_configs.json").read_text())

#: A small Llama: hidden 256, 2 layers, 4 heads of 64 (2 KV heads), MLP 512, vocabulary 1024.
TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
}
#: (module, inputs k, outputs n) of each linear layer of a TINY layer.
LINEARS = [
    ("self_attn.q_proj", 256, 256),
    ("self_attn.k_proj", 256, 128),
    ("self_attn.v_proj", 256, 128),
    ("self_attn.o_proj", 256, 256),
    ("mlp.gate_proj", 256, 512),
    ("mlp.up_proj", 256, 512),
    ("mlp.down_proj", 512, 256),
]


@pytest.mark.parametrize(
    ("repo", "fmt", "bits"),
    [
        ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "awq-int4-g128", 4 + 20 / 128),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "gptq-int4-g128", 4 + 20 / 128),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "ct-int4-a16-g128", 4.125),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "ct-fp8-a8", 8.0),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "ct-int8-a8", 8.0),
        ("Qwen/Qwen3-8B-FP8", "fp8-block128", 8 + 32 / 128**2),
        ("unsloth/llama-3-8b-bnb-4bit", "bnb-nf4-dq", 4 + 8 / 64 + 32 / (64 * 256)),
    ],
)
def test_published_quantization_configs_give_the_formats_bits_per_weight(repo, fmt, bits):
    scheme = scheme_of(PUBLISHED[repo], repo)
    assert scheme is not None
    assert (scheme.format, scheme.bits) == (fmt, pytest.approx(bits, rel=1e-12))
    assert "lm_head" in scheme.unquantized and "embedding" in scheme.unquantized


def test_mxfp4_leaves_what_gpt_oss_does_not_convert_in_16_bits():
    m = load_model("openai/gpt-oss-20b")  # the shipped config, no network
    assert m.stored is not None and m.stored.format == "mxfp4"
    assert m.stored.bits("expert_down_proj") == 4.25
    assert m.stored.bits("q_proj") == m.stored.bits("lm_head") == 16.0


@pytest.mark.parametrize(
    ("hub_id", "gib"), [("openai/gpt-oss-20b", 12.8), ("openai/gpt-oss-120b", 60.8)]
)
def test_gpt_oss_checkpoint_size_matches_the_published_figure(hub_id, gib):
    # arXiv 2508.10925 (gpt-oss model card) Table 1: checkpoint size 12.8 GiB and 60.8 GiB
    m = load_model(hub_id)
    stored = m.stored.mean_bits * m.param_count() / 8 / 2**30
    assert stored == pytest.approx(gib, rel=0.01)


def test_a_bare_shipped_id_keeps_the_dtype_and_its_hub_id_reads_the_checkpoint():
    assert load_model("gpt-oss-20b").stored is None
    plain = roofprof.predict("gpt-oss-20b", gpu="h100-sxm").to_dict()
    hub = roofprof.predict("openai/gpt-oss-20b", gpu="h100-sxm").to_dict()
    assert plain["weights"] == "bf16" and hub["weights"] == "mxfp4"
    assert hub["decode"]["weight_bytes"] < 0.6 * plain["decode"]["weight_bytes"]
    assert hub["checkpoint"]["source"] == "quantization_config"


def _awq_tensors(group: int) -> dict[str, np.ndarray]:
    """AutoAWQ's layout (WQLinear_GEMM): qweight int32 [k, n/8], qzeros int32 [k/g, n/8],
    scales fp16 [k/g, n]; embeddings, head and norms in fp16."""
    h, v = TINY["hidden_size"], TINY["vocab_size"]
    out = {
        "model.embed_tokens.weight": np.zeros((v, h), np.float16),
        "lm_head.weight": np.zeros((v, h), np.float16),
        "model.norm.weight": np.ones(h, np.float16),
    }
    for layer in range(TINY["num_hidden_layers"]):
        pre = f"model.layers.{layer}."
        out[pre + "input_layernorm.weight"] = np.ones(h, np.float16)
        out[pre + "post_attention_layernorm.weight"] = np.ones(h, np.float16)
        for name, k, n in LINEARS:
            out[pre + name + ".qweight"] = np.zeros((k, n // 8), np.int32)
            out[pre + name + ".qzeros"] = np.zeros((k // group, n // 8), np.int32)
            out[pre + name + ".scales"] = np.zeros((k // group, n), np.float16)
    return out


def _folder(tmp_path: Path, config: dict, tensors: dict | None, shards: int = 1) -> Path:
    from safetensors.numpy import save_file

    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    if tensors is not None:
        names = sorted(tensors)
        for i in range(shards):
            part = {n: tensors[n] for n in names[i::shards]}
            save_file(part, str(folder / f"model-{i + 1:05d}-of-{shards:05d}.safetensors"))
    return folder


def test_awq_folder_bytes_come_from_the_safetensors_headers(tmp_path):
    qc = PUBLISHED["hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"]
    folder = _folder(tmp_path, {**TINY, "quantization_config": qc}, _awq_tensors(128), shards=2)
    m = load_model(str(folder))
    stored = m.stored
    assert stored.source == "safetensors headers (2 files)" and m.source == f"folder {folder}"
    # each linear layer's bytes are 4 bits + an fp16 scale and a packed 4-bit zero per 128
    for op in ("q_proj", "k_proj", "gate_proj", "down_proj"):
        assert stored.bits(op) == pytest.approx(4 + 16 / 128 + 4 / 128, rel=1e-12)
    assert stored.bits("lm_head") == 16.0 and stored.bits("embedding") == 16.0
    files = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    headers = sum(
        sum(t.nbytes for t in read_safetensors_header(f)) for f in folder.glob("*.safetensors")
    )
    assert stored.total_bytes == headers and headers < files  # the headers' own bytes left out
    # the decode pass reads each layer at the stored bits: q_proj = k·n·bits/8 per layer
    p = roofprof.predict(str(folder), gpu="h100-sxm", prompt_tokens=16, dtype="fp16")
    q = next(o.op for o in p.decode.ops if o.op.name == "q_proj")
    assert q.weight_bytes == pytest.approx(256 * 256 * (4 + 20 / 128) / 8)
    assert p.to_dict()["weights"] == "awq-int4-g128"


def test_weights_option_overrides_the_checkpoint(tmp_path):
    qc = PUBLISHED["hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"]
    folder = _folder(tmp_path, {**TINY, "quantization_config": qc}, None)
    p = roofprof.predict(str(folder), gpu="h100-sxm", prompt_tokens=16, weights="int8")
    q = next(o.op for o in p.decode.ops if o.op.name == "q_proj")
    assert q.weight_bytes == 256 * 256 and "checkpoint" not in p.to_dict()


def test_config_only_folder_takes_the_bits_from_quantization_config(tmp_path):
    qc = PUBLISHED["RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16"]
    m = load_model(str(_folder(tmp_path, {**TINY, "quantization_config": qc}, None)))
    assert m.stored.source == "quantization_config" and m.stored.total_bytes is None
    assert m.stored.bits("up_proj") == 4.125 and m.stored.bits("lm_head") == 16.0


def test_index_total_size_is_the_stored_total_when_no_shard_is_there(tmp_path):
    folder = _folder(
        tmp_path, {**TINY, "quantization_config": PUBLISHED["Qwen/Qwen3-8B-FP8"]}, None
    )
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 2_000_000}, "weight_map": {}})
    )
    m = load_model(str(folder))
    assert m.stored.total_bytes == 2_000_000
    assert m.stored.source == "model.safetensors.index.json total_size"
    fit = Scenario.of(m, "decode", prompt_tokens=8).weight_bytes_per_element
    assert fit == pytest.approx(2_000_000 / m.param_count())


def test_an_unknown_method_is_refused_by_name_unless_weights_is_given(tmp_path):
    cfg = {**TINY, "quantization_config": {"quant_method": "aqlm", "nbits_per_codebook": 16}}
    folder = _folder(tmp_path, cfg, None)
    with pytest.raises(ConfigError, match="'aqlm'.*--weights"):
        roofprof.predict(str(folder), gpu="h100-sxm", prompt_tokens=16)
    p = roofprof.predict(str(folder), gpu="h100-sxm", prompt_tokens=16, weights="int4")
    assert p.to_dict()["weights"] == "int4"


def test_an_unknown_method_with_headers_is_predicted_from_the_bytes(tmp_path):
    cfg = {**TINY, "quantization_config": {"quant_method": "aqlm"}}
    m = load_model(str(_folder(tmp_path, cfg, _awq_tensors(64))))
    assert m.stored.bits("q_proj") == pytest.approx(4 + 20 / 64)


def test_folder_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="has no config.json"):
        load_model(str(empty))
    broken = _folder(tmp_path, TINY, None)
    (broken / "model.safetensors").write_bytes(b"\x10\x00")
    with pytest.raises(ConfigError, match="not a safetensors file"):
        load_model(str(broken))
    bad = {**TINY, "quantization_config": {"quant_method": "awq", "bits": 3.5}}
    (broken / "model.safetensors").unlink()
    (broken / "config.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="'bits' must be an integer"):
        load_model(str(broken))


def test_an_unmodelled_model_type_is_refused_by_name(tmp_path):
    folder = _folder(tmp_path, {**TINY, "model_type": "falcon", "architectures": []}, None)
    with pytest.raises(UnknownNameError, match="'falcon'"):
        load_model(str(folder))


def test_a_config_json_path_reads_its_quantization_too(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps({**TINY, "quantization_config": PUBLISHED["unsloth/llama-3-8b-bnb-4bit"]})
    )
    m = load_model(str(path))
    assert m.stored.format == "bnb-nf4-dq" and not math.isnan(m.stored.mean_bits)
    assert "quantization_config" not in m.ignored_fields


def test_config_only_decode_bytes_follow_the_formats_bits(tmp_path):
    qc = PUBLISHED["Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"]
    folder = _folder(tmp_path, {**TINY, "quantization_config": qc}, None)
    p = roofprof.predict(str(folder), gpu="h100-sxm", prompt_tokens=16)
    ops = {o.op.name: o.op for o in p.decode.ops}
    bits = 4 + 16 / 128 + 4 / 128
    for name, k, n in LINEARS:
        assert ops[name.split(".")[1]].weight_bytes == pytest.approx(k * n * bits / 8)
    assert ops["lm_head"].weight_bytes == 1024 * 256 * 2  # left in 16 bits


def test_a_real_run_uses_dense_weights_at_the_dtype(tmp_path):
    qc = PUBLISHED["hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"]
    folder = _folder(tmp_path, {**TINY, "quantization_config": qc}, None)
    dense = Scenario.of(str(folder), "decode", dtype="fp32", stored_weights=False)
    assert dense.model.stored is None and dense.weight_precision == "fp32"
    assert Scenario.of(str(folder), "decode").weight_precision == "awq-int4-g128"


def test_nvfp4_and_hqq_layouts():
    # compressed-tensors' NVFP4 preset: fp4 (E2M1) weights in groups of 16 with FP8 scales
    nvfp4 = {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 4,
                    "type": "float",
                    "strategy": "tensor_group",
                    "group_size": 16,
                    "symmetric": True,
                },
                "input_activations": {
                    "num_bits": 4,
                    "type": "float",
                    "strategy": "tensor_group",
                    "group_size": 16,
                    "dynamic": "local",
                },
            }
        },
        "ignore": ["lm_head"],
    }
    s = scheme_of(nvfp4)
    assert s is not None and s.bits == 4 + 8 / 16 and s.format == "ct-fp4-a4-g16"
    hqq = {
        "quant_method": "hqq",
        "quant_config": {"weight_quant_params": {"nbits": 4, "group_size": 64}},
    }
    h = scheme_of(hqq)
    assert h is not None and h.bits == 4 + 32 / 64 and "16-bit" in h.assumption
