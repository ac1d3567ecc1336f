"""The worked example's back-of-envelope numbers (Llama 3.1 8B bf16 on an H100 SXM), reproduced
with the ``rule-of-thumb`` counting (the README's worked-example table)."""

import pytest

from roofprof import predict


def rule_of_thumb(gpu="h100-sxm", **kw):
    kw.setdefault("prompt_tokens", 2000)
    return predict("llama-3.1-8b", gpu=gpu, convention="rule-of-thumb", **kw)


def test_prefill_2000_tokens_is_33_tflop_and_34_ms():
    p = rule_of_thumb()
    assert p.prefill.flops == pytest.approx(33.2e12, rel=0.01)
    assert p.prefill.seconds == pytest.approx(33.6e-3, rel=0.02)
    assert p.prefill.bound == "compute"


def test_engine_counting_is_about_29_tflop():
    p = predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000)
    assert p.prefill.flops == pytest.approx(29.0e12, rel=0.02)
    assert "last tokens" in p.to_dict()["counting"]


def test_decode_rereads_16_gb_at_4_8_ms_and_209_tokens_per_s():
    p = rule_of_thumb(context_tokens=0)
    assert p.decode.workload.weight_bytes == pytest.approx(16.06e9, rel=0.001)
    assert p.decode.seconds == pytest.approx(4.79e-3, rel=0.01)
    assert p.tokens_per_second == pytest.approx(208.5, rel=0.01)
    assert p.decode.bound == "memory"
    # at the 2,000-token context the KV cache adds ~1.6%
    assert rule_of_thumb().decode.seconds == pytest.approx(4.87e-3, rel=0.01)


def test_ridge_points():
    assert rule_of_thumb().ridge_flops_per_byte == pytest.approx(295.3, abs=0.5)
    assert rule_of_thumb("h200").ridge_flops_per_byte == pytest.approx(206.1, abs=0.5)
    assert rule_of_thumb("a100-sxm-80gb").ridge_flops_per_byte == pytest.approx(153, abs=0.5)


def test_intensity_decode_about_1_prefill_about_2000():
    d = rule_of_thumb().to_dict()
    assert d["decode"]["intensity"] == pytest.approx(1.0, abs=0.1)
    linear = [o for o in rule_of_thumb().prefill.ops if o.op.name == "gate_proj"][0].op
    assert linear.intensity > 1000


def test_batch_64_shares_the_weights():
    p = rule_of_thumb(prompt_tokens=256, batch=64)
    assert p.decode.seconds == pytest.approx(5.4e-3, rel=0.04)
    assert p.tokens_per_second > 11_000


def test_32k_prompt_is_0_8_s_a_third_attention():
    p = rule_of_thumb(prompt_tokens=32_000)
    assert p.prefill.seconds == pytest.approx(0.79, rel=0.02)
    assert p.prefill.workload.attention_flops / p.prefill.flops == pytest.approx(0.34, abs=0.01)
    assert p.to_dict()["prefill"]["attention_share"] == pytest.approx(0.34, abs=0.01)


def test_kv_cache_at_16k_is_2_1_gb_and_13_percent_slower():
    long, short = rule_of_thumb(prompt_tokens=16_000), rule_of_thumb(prompt_tokens=16)
    assert long.decode.workload.kv_bytes == pytest.approx(2.10e9, rel=0.01)
    assert long.decode.seconds / short.decode.seconds == pytest.approx(1.13, abs=0.01)


def test_a100_vs_h100():
    a, h = rule_of_thumb("a100-sxm-80gb"), rule_of_thumb()
    assert a.decode.seconds / h.decode.seconds == pytest.approx(1.64, abs=0.03)
    assert a.prefill.seconds / h.prefill.seconds == pytest.approx(3.17, abs=0.05)


def test_the_older_convention_name_is_still_accepted():
    old = predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000, convention="seed")
    assert old.to_dict() == rule_of_thumb().to_dict()
