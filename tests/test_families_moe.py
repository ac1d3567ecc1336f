"""Mixture-of-experts families: parameter counts, MLA cache, routing, bad input."""

from __future__ import annotations

import json
import time

import pytest

from roofprof.errors import ConfigError
from roofprof.models import ops
from roofprof.models.moe import parse_routing, summary
from roofprof.models.moe_config import UNIFORM, Routing, param_counts
from roofprof.prediction.memory_fit import fit_memory
from roofprof.specs import load_model
from roofprof.workload import Scenario

MOE_IDS = ["qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b"]

#: Published (total, active, rounding step of the published figures, active convention).
#: Mixtral: mistral.ai/news/mixtral-of-experts ("46.7B total parameters but only uses 12.9B
#: parameters per token"); Qwen3-30B-A3B: its model card ("30.5B in total and 3.3B
#: activated"); DeepSeek-V3: README_WEIGHTS.md ("Total parameters: 671B, Activation
#: parameters: 36.6B (including 0.9B for the output Head)": no input embedding); gpt-oss:
#: the model card (arXiv 2508.10925, Table 1: 116.83B / 5.13B and 20.91B / 3.61B, active
#: without the embedding table).
PUBLISHED = {
    "mixtral-8x7b": (46.7e9, 12.9e9, 0.1e9, "active"),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, 0.1e9, "active"),
    "deepseek-v3": (671e9, 36.6e9, 0.1e9, "active_excluding_embedding"),
    "gpt-oss-20b": (20.91e9, 3.61e9, 0.01e9, "active_excluding_embedding"),
    "gpt-oss-120b": (116.83e9, 5.13e9, 0.01e9, "active_excluding_embedding"),
}


def _close(ours: float, published: float, step: float) -> bool:
    """Within 1 % of the published figure, which is itself rounded to ``step`` (half a step
    more)."""
    return abs(ours - published) <= 0.01 * published + step / 2


@pytest.mark.parametrize("model_id", MOE_IDS)
def test_total_and_active_params_match_published(model_id):
    total, active, step, convention = PUBLISHED[model_id]
    counts = param_counts(load_model(model_id))
    assert _close(counts.total, total, step), counts
    assert _close(getattr(counts, convention), active, step), counts
    assert load_model(model_id).param_count() == counts.total
    assert load_model(model_id).active_param_count() == counts.active


def test_exact_counts_by_hand():
    # Mixtral: 32 × (attention 41,943,040 + 8 experts × 176,160,768 + router 32,768 + norms 8,192)
    #          + embedding and head 2 × 131,072,000 + final norm 4,096
    per_layer = 41_943_040 + 8 * 176_160_768 + 32_768 + 8_192
    assert load_model("mixtral-8x7b").param_count() == 32 * per_layer + 2 * 131_072_000 + 4_096


def test_deepseek_kv_cache_is_the_latent_and_rope_key_exactly():
    m = load_model("deepseek-v3")
    assert m.kv_bytes_per_token("bf16") == (512 + 64) * 61 * 2
    assert m.kv_bytes_per_token("fp8") == (512 + 64) * 61
    w = ops(Scenario.of(m, "decode", batch=4, context_tokens=4095, dtype="bf16"))
    assert w.kv_bytes == 4 * 4096 * (512 + 64) * 61 * 2
    f = fit_memory(Scenario.of(m, "decode", batch=4, context_tokens=4095, dtype="bf16"), "h200")
    assert f.kv_bytes_per_sequence == 4096 * (512 + 64) * 61 * 2
    assert f.weights_bytes == pytest.approx(m.param_count() * 2, rel=1e-6)  # every expert held


def test_memory_fit_counts_every_expert():
    m = load_model("mixtral-8x7b")
    f = fit_memory(Scenario.of(m, "decode", context_tokens=0), "h200")
    assert f.weights_bytes == pytest.approx(m.param_count() * 2, rel=1e-6)
    assert f.weights_bytes > 3 * m.active_param_count() * 2


def test_uniform_expected_experts_formula_and_decode_weight_growth():
    m = load_model("qwen3-30b-a3b")
    E, k = 128, 8
    for batch in (1, 4, 32, 256):
        expected = E * (1 - (1 - k / E) ** batch)
        assert UNIFORM.expected_experts(E, k, batch) == pytest.approx(expected)
    weights = [
        ops(Scenario.of(m, "decode", batch=b, context_tokens=0)).weight_bytes
        for b in (1, 4, 32, 256)
    ]
    assert weights == sorted(weights) and weights[-1] / weights[0] > 8
    expert = m.moe.expert_params(m.hidden_size) * 2
    growth = weights[1] - weights[0]
    touched = UNIFORM.expected_experts(E, k, 4) - UNIFORM.expected_experts(E, k, 1)
    rows = 3 * 2048 * 2  # three more embedding rows gathered
    assert growth == pytest.approx(touched * expert * 48 + rows, rel=1e-12)


def test_expert_gemm_flops_exact_and_prefill_grouped_shapes():
    m = load_model("mixtral-8x7b")
    w = ops(Scenario.of(m, "prefill", batch=2, prompt_tokens=512, dtype="bf16"))
    up = next(op for op in w.ops if op.name == "expert_gate_up_proj")
    tokens = 2 * 512
    assert up.flops == 2.0 * tokens * 2 * (2 * 14336) * 4096
    assert up.batch == 8 and up.m == tokens * 2 // 8  # 128 tokens per expert on average
    assert up.count == 32 and up.fn == "moe_linear"


def test_deepseek_dense_first_layers_then_moe_with_shared_experts():
    w = ops(Scenario.of("deepseek-v3", "decode", context_tokens=0))
    counts = {op.name: op.count for op in w.ops}
    assert (
        counts["gate_proj"] == 3
        and counts["expert_gate_up_proj"] == 58
        and counts["shared_up_proj"] == 58
    )
    assert counts["q_a_proj"] == 61 and "kv_b_proj" not in counts  # absorbed in decode
    prefill = {op.name for op in ops(Scenario.of("deepseek-v3", "prefill", prompt_tokens=64)).ops}
    assert "kv_b_proj" in prefill and "q_absorb" not in prefill


def test_gpt_oss_local_layers_cap_keys_and_sinks():
    w = ops(Scenario.of("gpt-oss-120b", "decode", context_tokens=4095))
    attn = {op.name: op for op in w.ops if op.kind == "attention"}
    assert attn["attention"].n == 4096 and attn["attention_local"].n == 128
    assert attn["attention"].count == attn["attention_local"].count == 18
    assert "sinks" in attn["attention"].note
    m = load_model("gpt-oss-120b")
    f = fit_memory(Scenario.of(m, "decode", context_tokens=4095, dtype="bf16"), "h200")
    assert f.kv_bytes_per_sequence == 2 * 8 * 64 * 2 * (18 * 4096 + 18 * 128)


def test_skewed_and_measured_routing(tmp_path):
    zipf = parse_routing("zipf:1.2")
    assert zipf.expected_experts(128, 8, 1) == pytest.approx(8.0)
    assert zipf.expected_experts(128, 8, 64) < UNIFORM.expected_experts(128, 8, 64)
    path = tmp_path / "loads.json"
    path.write_text(json.dumps({"experts": [3, 1, 0, 0, 2, 2, 0, 0]}))
    measured = parse_routing(str(path))
    assert measured.kind == "measured" and measured.expected_experts(8, 2, 10_000) == pytest.approx(
        4.0
    )
    with pytest.raises(ConfigError, match="8 experts"):
        measured.inclusion(16, 2)
    for bad in ("zipf:0", "zipf:x", "skewed", str(tmp_path / "missing.json")):
        with pytest.raises(ConfigError):
            parse_routing(bad)


def test_predict_json_moe_block_and_routing_option(tmp_path, capsys):
    from roofprof.cli import main

    assert (
        main(["predict", "-m", "mixtral-8x7b", "--gpu", "h100-sxm", "-b", "16", "-f", "json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    block = out["moe"]
    assert block["total_params"] > 46e9 and 12.8e9 < block["active_params"] < 13e9
    assert block["decode"]["experts_touched_per_layer"] == pytest.approx(
        8 * (1 - (1 - 2 / 8) ** 16), abs=1e-4
    )
    assert "uniform routing" in block["routing"]
    assert (
        main(
            [
                "predict",
                "-m",
                "qwen3-30b-a3b",
                "--gpu",
                "h100-sxm",
                "-b",
                "16",
                "-f",
                "json",
                "--routing",
                "zipf:1.5",
            ]
        )
        == 0
    )
    skewed = json.loads(capsys.readouterr().out)
    assert "Zipf" in skewed["moe"]["routing"]
    assert (
        skewed["decode"]["weight_bytes"]
        < json.loads(_run(main, capsys, "qwen3-30b-a3b"))["decode"]["weight_bytes"]
    )
    assert main(["predict", "-m", "mixtral-8x7b", "--gpu", "h200", "--tp", "2", "-f", "json"]) == 0
    assert (
        json.loads(capsys.readouterr().out)["moe"]["experts"] == 8
    )  # kept beside the layout block
    assert main(["predict", "-m", "llama-3.2-1b", "--gpu", "h100-sxm", "--routing", "zipf:1"]) == 2
    assert "mixture-of-experts" in capsys.readouterr().err


def _run(main, capsys, model: str) -> str:
    assert main(["predict", "-m", model, "--gpu", "h100-sxm", "-b", "16", "-f", "json"]) == 0
    return capsys.readouterr().out


def test_specs_lists_total_and_active(capsys):
    from roofprof.report import specs_payload

    rows = {m["id"]: m for m in specs_payload()["models"]}
    assert rows["deepseek-v3"]["active_params"] < rows["deepseek-v3"]["params"] / 10
    assert rows["llama-3.1-8b"]["active_params"] == rows["llama-3.1-8b"]["params"]


@pytest.mark.parametrize("model_id", MOE_IDS)
def test_predict_under_a_second(model_id, capsys):
    from roofprof.cli import main

    args = ["predict", "-m", model_id, "--gpu", "h100-sxm", "-f", "json"]
    assert main(args) == 0  # first call: lazy imports (numpy, rich, ...), not the prediction
    start = time.perf_counter()
    assert main(args) == 0
    assert time.perf_counter() - start < 1.0
    capsys.readouterr()


def _write(tmp_path, model_id, **changes):
    cfg = json.loads(
        load_model.__globals__["_data_root"]().joinpath("models", f"{model_id}.json").read_text()
    )
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


BAD = [
    ("mixtral-8x7b", {"num_experts_per_tok": 9}, "more than the 8 experts"),
    ("mixtral-8x7b", {"num_local_experts": None}, "missing field 'num_local_experts'"),
    (
        "qwen3-30b-a3b",
        {"moe_intermediate_size": 0},
        "'moe_intermediate_size' must be a positive integer",
    ),
    ("qwen3-30b-a3b", {"mlp_only_layers": [0, 1]}, "'mlp_only_layers'.*not modelled"),
    ("qwen3-30b-a3b", {"decoder_sparse_step": 2}, "'decoder_sparse_step'.*not modelled"),
    ("deepseek-v3", {"kv_lora_rank": None}, "missing field 'kv_lora_rank'"),
    ("deepseek-v3", {"first_k_dense_replace": 99}, "more than num_hidden_layers"),
    ("deepseek-v3", {"topk_group": 9}, "topk_group 9 is more than n_group 8"),
    ("deepseek-v3", {"moe_layer_freq": 2}, "'moe_layer_freq'.*not modelled"),
    ("gpt-oss-20b", {"experts_per_token": 2}, "contradicts num_experts_per_tok"),
    ("gpt-oss-20b", {"layer_types": ["full_attention"] * 3}, "one type per layer"),
    (
        "gpt-oss-20b",
        {"layer_types": ["chunked_attention"] * 24},
        "'chunked_attention'.*not modelled",
    ),
]


@pytest.mark.parametrize(("model_id", "changes", "message"), BAD)
def test_bad_configs_exit_2_with_one_line(tmp_path, capsys, model_id, changes, message):
    from roofprof.cli import main

    path = _write(tmp_path, model_id, **changes)
    with pytest.raises(ConfigError, match=message):
        load_model(path)
    assert main(["predict", "-m", path, "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_summary_states_the_kv_cache():
    s = summary(load_model("deepseek-v3"), 100, 1, 2.0, 99)
    assert (
        s["kv_cache"]["bytes_per_sequence"] == 100 * 576 * 61 * 2
        and "latent" in s["kv_cache"]["holds"]
    )
    assert Routing().describe().startswith("uniform routing")
