import pytest

from roofprof.errors import ConfigError, UnknownNameError
from roofprof.models import llama_ops
from roofprof.specs import load_model
from roofprof.workload import Counting

M8 = load_model("llama-3.1-8b")


def by_name(w):
    return {op.name: op for op in w.ops}


def test_gemm_shapes_and_counts():
    w = llama_ops(M8, "prefill", batch=2, prompt_tokens=100, dtype="bf16")
    ops = by_name(w)
    assert (ops["q_proj"].m, ops["q_proj"].n, ops["q_proj"].k) == (200, 4096, 4096)
    assert (ops["k_proj"].n, ops["v_proj"].n) == (1024, 1024)  # GQA: 8 KV heads × 128
    assert (ops["gate_proj"].n, ops["down_proj"].k) == (14336, 14336)
    assert ops["q_proj"].count == 32 and ops["lm_head"].count == 1
    assert ops["lm_head"].m == 2  # last token of each sequence (engine default)
    assert ops["q_proj"].flops == 2 * 200 * 4096 * 4096
    assert ops["q_proj"].bytes == 2 * (4096 * 4096 + 200 * 4096 + 200 * 4096)


def test_causal_prefill_attention_counts_pairs_below_the_diagonal():
    w = llama_ops(M8, "prefill", prompt_tokens=10, dtype="bf16")
    att = by_name(w)["attention"]
    assert att.flops == 4 * 32 * (10 * 11 / 2) * 128
    assert att.batch == 32


def test_unfused_attention_is_the_full_square_through_memory():
    fused = by_name(llama_ops(M8, "prefill", prompt_tokens=64, dtype="bf16"))
    eager = by_name(
        llama_ops(
            M8, "prefill", prompt_tokens=64, dtype="bf16", convention=Counting(attention="unfused")
        )
    )
    assert {"attn_scores", "attn_softmax", "attn_pv"} <= set(eager)
    assert eager["attn_scores"].flops == 2 * 32 * 64 * 64 * 128
    scores_bytes = 32 * 64 * 64 * 2
    assert eager["attn_softmax"].bytes == 2 * scores_bytes
    assert eager["attn_scores"].bytes > fused["attention"].bytes / 2


def test_decode_reads_the_kv_cache_with_gqa():
    w = llama_ops(M8, "decode", batch=4, context_tokens=999, dtype="bf16")
    att = by_name(w)["attention"]
    assert att.kv_bytes == 4 * 1000 * 2 * 1024 * 2
    assert w.kv_bytes == 4 * 1000 * M8.kv_bytes_per_token("bf16")
    assert by_name(w)["q_proj"].m == 4


def test_fused_elementwise_ops_move_no_bytes():
    sep = by_name(llama_ops(M8, "decode", context_tokens=8, dtype="bf16"))
    fused = by_name(
        llama_ops(
            M8, "decode", context_tokens=8, dtype="bf16", convention=Counting(elementwise="fused")
        )
    )
    assert sep["silu_mul"].bytes == 3 * 14336 * 2
    assert fused["silu_mul"].bytes == 0 and fused["silu_mul"].flops == sep["silu_mul"].flops


def test_weight_bytes_sum_to_parameters():
    # every parameter is read once per decode step when the embedding table is read whole
    w = llama_ops(
        M8, "decode", context_tokens=0, dtype="fp32", convention=Counting(embedding="matmul")
    )
    assert w.weight_bytes == 4 * M8.param_count()
    # a gather reads one embedding row per token instead of the table
    g = llama_ops(M8, "decode", context_tokens=0, dtype="fp32")
    assert w.weight_bytes - g.weight_bytes == 4 * (M8.vocab_size - 1) * M8.hidden_size
    tied = load_model("llama-3.2-1b")
    assert tied.param_count() == 1_235_814_400


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(batch=0, prompt_tokens=5),
        dict(prompt_tokens=0),
        dict(prompt_tokens=5, context_tokens=-1),
    ],
)
def test_impossible_sizes(kwargs):
    with pytest.raises(ConfigError):
        llama_ops(M8, "prefill", dtype="bf16", **kwargs)


def test_unknown_phase_and_dtype():
    with pytest.raises(UnknownNameError, match="prefill"):
        llama_ops(M8, "train", prompt_tokens=5)
    with pytest.raises(UnknownNameError, match="bf16"):
        llama_ops(M8, "prefill", prompt_tokens=5, dtype="bfloat17")


def test_scenario_is_the_key_and_the_family_builds_its_ops():
    from roofprof import models
    from roofprof.workload import Scenario

    s = Scenario.of(
        "llama-3.1-8b", "decode", batch=4, prompt_tokens=100, context_tokens=999, dtype="bf16"
    )
    w = models.ops(s)
    assert (
        w.ops
        == llama_ops(M8, "decode", batch=4, prompt_tokens=100, context_tokens=999, dtype="bf16").ops
    )
    assert w.scenario == s and hash(w.scenario) == hash(s) and {s: 1}[w.scenario] == 1
    assert models.ops(s.replace(phase="prefill")).phase == "prefill"
    assert {op.fn for op in w.ops} >= {
        "linear",
        "rmsnorm",
        "rope",
        "add",
        "silu_mul",
        "sdpa",
        "gather",
    }
    assert all(op.group and op.short for op in w.ops)
    assert w.ops[2].to_dict() == {
        "name": "q_proj",
        "kind": "gemm",
        "phase": "decode",
        "scope": "layer",
        "m": 4,
        "n": 4096,
        "k": 4096,
        "batch": 1,
        "count": 32,
        "dtype": "bf16",
    }


def test_model_families_and_unknown_ones():
    from roofprof import models
    from roofprof.models import llama

    assert models.FAMILIES["llama"] is llama
    assert models.family_of({"model_type": "llama"}) == "llama"
    with pytest.raises(UnknownNameError, match="dbrx.*valid choices:.*llama"):
        models.family_of({"model_type": "dbrx"})
    import dataclasses

    from roofprof.workload import Scenario

    alien = dataclasses.replace(M8, family="mamba")
    with pytest.raises(UnknownNameError, match="mamba"):
        models.ops(Scenario(alien, "decode"))
