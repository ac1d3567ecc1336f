"""The seed's story (../shared/seed, checked in ../shared/reference/models.md), reproduced."""

import pytest

from roofprof import predict


def seed(gpu="h100-sxm", **kw):
    kw.setdefault("prompt_tokens", 2000)
    return predict("llama-3.1-8b", gpu=gpu, convention="seed", **kw)


def test_prefill_2000_tokens_is_33_tflop_and_34_ms():
    p = seed()
    assert p.prefill.flops == pytest.approx(33.2e12, rel=0.01)
    assert p.prefill.seconds == pytest.approx(33.6e-3, rel=0.02)
    assert p.prefill.bound == "compute"


def test_engine_counting_is_about_29_tflop():
    p = predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000)
    assert p.prefill.flops == pytest.approx(29.0e12, rel=0.02)
    assert "last tokens" in p.to_dict()["counting"]


def test_decode_rereads_16_gb_at_4_8_ms_and_209_tokens_per_s():
    p = seed(context_tokens=0)
    assert p.decode.workload.weight_bytes == pytest.approx(16.06e9, rel=0.001)
    assert p.decode.seconds == pytest.approx(4.79e-3, rel=0.01)
    assert p.tokens_per_second == pytest.approx(208.6, rel=0.01)
    assert p.decode.bound == "memory"
    # at the 2,000-token context the KV cache adds ~1.6%
    assert seed().decode.seconds == pytest.approx(4.87e-3, rel=0.01)


def test_ridge_points():
    assert seed().ridge_flops_per_byte == pytest.approx(295.3, abs=0.5)
    assert seed("h200").ridge_flops_per_byte == pytest.approx(206.1, abs=0.5)
    assert seed("a100-sxm-80gb").ridge_flops_per_byte == pytest.approx(153, abs=0.5)


def test_intensity_decode_about_1_prefill_about_2000():
    d = seed().to_dict()
    assert d["decode"]["intensity"] == pytest.approx(1.0, abs=0.1)
    linear = [o for o in seed().prefill.ops if o.op.name == "gate_proj"][0].op
    assert linear.intensity > 1000


def test_batch_64_shares_the_weights():
    p = seed(prompt_tokens=256, batch=64)
    assert p.decode.seconds == pytest.approx(5.4e-3, rel=0.04)
    assert p.tokens_per_second > 11_000


def test_32k_prompt_is_0_8_s_a_third_attention():
    p = seed(prompt_tokens=32_000)
    assert p.prefill.seconds == pytest.approx(0.79, rel=0.02)
    assert p.prefill.workload.attention_flops / p.prefill.flops == pytest.approx(0.34, abs=0.01)
    assert p.to_dict()["prefill"]["attention_share"] == pytest.approx(0.34, abs=0.01)


def test_kv_cache_at_16k_is_2_1_gb_and_13_percent_slower():
    long, short = seed(prompt_tokens=16_000), seed(prompt_tokens=16)
    assert long.decode.workload.kv_bytes == pytest.approx(2.10e9, rel=0.01)
    assert long.decode.seconds / short.decode.seconds == pytest.approx(1.13, abs=0.01)


def test_a100_vs_h100():
    a, h = seed("a100-sxm-80gb"), seed()
    assert a.decode.seconds / h.decode.seconds == pytest.approx(1.64, abs=0.03)
    assert a.prefill.seconds / h.prefill.seconds == pytest.approx(3.17, abs=0.05)
