"""Dense Llama-like families beyond Llama: Qwen2/2.5, Mistral, Qwen3."""

import json
import time

import pytest

from roofprof.cli import main
from roofprof.errors import ConfigError
from roofprof.models import FAMILIES, ops
from roofprof.specs import load_model
from roofprof.workload import Parallel, Scenario

#: Published totals (model cards: Qwen2.5-0.5B 0.49 B, Qwen2.5-7B 7.61-7.62 B, Mistral 7B v0.3
#: 7.25 B, Qwen3-8B 8.2 B).
PUBLISHED = {
    "qwen2.5-0.5b": 0.49e9,
    "qwen2.5-7b": 7.62e9,
    "mistral-7b-v0.3": 7.25e9,
    "qwen3-8b": 8.19e9,
}


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _config(tmp_path, **fields):
    cfg = {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        **fields,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_param_counts_match_published(model_id):
    spec = load_model(model_id)
    assert spec.param_count() == pytest.approx(PUBLISHED[model_id], rel=0.01)
    assert spec.family in FAMILIES
    w = ops(Scenario.of(model_id, "decode", context_tokens=0, dtype="bf16", convention="seed"))
    # seed convention: a decode step reads every weight once (the tied table twice, as for
    # Llama 3.2)
    table = 0 if not spec.tie_word_embeddings else spec.vocab_size * spec.hidden_size
    assert w.weight_bytes == pytest.approx(2 * (spec.param_count() + table), rel=0.01)
    assert all(op.fn and op.group and op.short for op in w.ops)
    hash(spec)


def test_qwen2_bias_folded_into_qkv():
    spec = load_model("qwen2.5-7b")
    assert spec.attention_bias and not spec.qk_norm and spec.sliding_window is None
    w = ops(Scenario.of(spec, "prefill", prompt_tokens=16, dtype="bf16"))
    k = next(op for op in w.ops if op.name == "k_proj")
    o = next(op for op in w.ops if op.name == "o_proj")
    assert k.weight_bytes == (512 * 3584 + 512) * 2 and k.flops == 2 * 16 * 512 * 3584 + 16 * 512
    assert o.weight_bytes == 3584 * 3584 * 2 and o.flops == 2 * 16 * 3584 * 3584
    assert load_model("qwen2.5-0.5b").tie_word_embeddings


def test_qwen3_head_norms_and_explicit_head_dim():
    spec = load_model("qwen3-8b")
    assert spec.head_dim == 128 and spec.qk_norm and not spec.attention_bias
    w = ops(Scenario.of(spec, "decode", context_tokens=10, dtype="bf16", convention="engine"))
    q, k = (next(op for op in w.ops if op.name == n) for n in ("q_norm", "k_norm"))
    assert (q.fn, k.fn, q.n, k.n) == ("rmsnorm", "rmsnorm", 32 * 128, 8 * 128)
    tp = ops(Scenario.of(spec, "decode", context_tokens=10, dtype="bf16", parallel=Parallel(tp=2)))
    assert next(op for op in tp.ops if op.name == "q_norm").n == 16 * 128


def test_qwen3_head_dim_not_hidden_over_heads(tmp_path):
    spec = load_model(_config(tmp_path, model_type="qwen3", head_dim=32))  # 256 / 4 = 64
    assert spec.q_size == 128
    w = ops(Scenario.of(spec, "decode", context_tokens=0, dtype="bf16", convention="seed"))
    assert next(op for op in w.ops if op.name == "q_proj").n == 128


def test_mistral_without_window_is_llama():
    mistral = load_model("mistral-7b-v0.3")
    assert mistral.sliding_window is None
    import dataclasses

    llama = dataclasses.replace(mistral, family="llama")
    for phase in ("prefill", "decode"):
        a = ops(Scenario.of(mistral, phase, prompt_tokens=64, context_tokens=5000, dtype="bf16"))
        b = ops(Scenario.of(llama, phase, prompt_tokens=64, context_tokens=5000, dtype="bf16"))
        assert a.ops == b.ops


def test_mistral_sliding_window_caps_keys_and_cache(tmp_path):
    from roofprof.prediction.memory_fit import fit_memory as memory_fit
    from roofprof.specs import load_gpu

    spec = load_model(_config(tmp_path, model_type="mistral", sliding_window=100))
    full = load_model(_config(tmp_path, model_type="mistral"))
    assert spec.sliding_window == 100 and full.sliding_window is None

    def attention(model, phase, **kw):
        w = ops(Scenario.of(model, phase, dtype="bf16", **kw))
        return next(op for op in w.ops if op.name == "attention")

    assert attention(spec, "decode", context_tokens=50).n == 51  # under the window
    capped, uncapped = (
        attention(spec, "decode", context_tokens=999),
        attention(full, "decode", context_tokens=999),
    )
    assert (capped.n, uncapped.n) == (100, 1000)
    assert capped.kv_bytes == pytest.approx(uncapped.kv_bytes / 10)
    pre, pre_full = (
        attention(spec, "prefill", prompt_tokens=300),
        attention(full, "prefill", prompt_tokens=300),
    )
    assert pre.flops / pre_full.flops == pytest.approx(
        (100 * 101 / 2 + 200 * 100) / (300 * 301 / 2)
    )
    gpu = load_gpu("h100-sxm")
    fit = memory_fit(Scenario.of(spec, "decode", context_tokens=999, dtype="bf16"), gpu)
    fit_full = memory_fit(Scenario.of(full, "decode", context_tokens=999, dtype="bf16"), gpu)
    assert fit.kv_bytes_per_sequence * 10 == fit_full.kv_bytes_per_sequence


@pytest.mark.parametrize(
    "fields, name",
    [
        ({"model_type": "mistral", "sliding_window": 0}, "sliding_window"),
        ({"model_type": "mistral", "sliding_window": -4}, "sliding_window"),
        ({"model_type": "mistral", "sliding_window": "4096"}, "sliding_window"),
        ({"model_type": "qwen3", "attention_bias": "no"}, "attention_bias"),
        ({"model_type": "qwen3", "head_dim": 0}, "head_dim"),
        ({"model_type": "qwen2", "use_sliding_window": True}, "use_sliding_window"),
        ({"model_type": "qwen2", "num_key_value_heads": -1}, "num_key_value_heads"),
    ],
)
def test_bad_family_fields_are_config_errors(tmp_path, capsys, fields, name):
    path = _config(tmp_path, **fields)
    with pytest.raises(ConfigError, match=name):
        load_model(path)
    code, _, err = run(capsys, "predict", "--model", path, "--gpu", "h100-sxm")
    assert code == 2 and name in err


def test_predict_qwen_fast_and_specs_lists_new_models(capsys):
    t0 = time.perf_counter()
    code, out, _ = run(capsys, "predict", "--model", "qwen2.5-7b", "--gpu", "h100-sxm")
    assert code == 0 and "lm_head" in out and time.perf_counter() - t0 < 1.0
    code, out, _ = run(capsys, "specs", "--format", "json")
    ids = {m["id"] for m in json.loads(out)["models"]}
    assert code == 0 and set(PUBLISHED) <= ids


@pytest.mark.parametrize("verb", ["profile", "validate"])
def test_measuring_refuses_family_without_torch_side(capsys, monkeypatch, verb):
    import roofprof.models.families as families  # every dense family has one now: take qwen2's away

    monkeypatch.setattr(
        families, "TORCH_SIDES", {k: v for k, v in families.TORCH_SIDES.items() if k != "qwen2"}
    )
    code, _, err = run(capsys, verb, "--model", "qwen2.5-0.5b")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "qwen2" in lines[0] and verb in lines[0]
