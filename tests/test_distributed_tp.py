"""Tensor-parallel Llama shard, sequence-parallel norm rows, the all-ranks flagging, and the
2-rank gloo runs of `validate --tp` and `roofline --all-ranks` (structure, not timing)."""

from __future__ import annotations

import json

import pytest

from roofprof.distributed.fleet import flag_slow, nvml_state
from roofprof.errors import ConfigError
from roofprof.models import ops
from roofprof.specs import ModelSpec
from roofprof.workload import Parallel, Scenario

pytestmark = pytest.mark.slow  # subprocesses, ranks or pinned installs: seconds each

torch = pytest.importorskip("torch")

TINY = ModelSpec(
    "tiny",
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    vocab_size=100,
    tie_word_embeddings=True,
    max_position_embeddings=256,
)


def _shards_logits(tp: int, ids):
    """All ranks' shards run in one process, collectives computed across them by threads."""
    import threading

    from roofprof.distributed.tp_model import Comm, TPLlama
    from roofprof.models.llama_torch import KVCache, TorchLlama

    full = TorchLlama(TINY)
    barrier = threading.Barrier(tp)
    slots: list = [None] * tp
    out: list = [None] * tp

    def comm(rank):
        def all_reduce(t):
            slots[rank] = t.clone()
            barrier.wait()
            total = sum(slots)
            barrier.wait()
            t.copy_(total)

        def all_gather(t):
            slots[rank] = t.clone()
            barrier.wait()
            parts = list(slots)
            barrier.wait()
            return parts

        return Comm(all_reduce, all_gather)

    shards = [TPLlama(full, r, tp, comm(r)) for r in range(tp)]

    def run(r):
        out[r] = shards[r](ids, KVCache())

    threads = [threading.Thread(target=run, args=(r,)) for r in range(tp)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return full(ids, KVCache()), out


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_tp_shards_give_the_single_rank_logits(tp):
    ids = torch.tensor([[1, 5, 7, 9], [2, 3, 99, 0]])
    expected, got = _shards_logits(tp, ids)
    for logits in got:  # tp 4 > 2 KV heads: replicated
        assert torch.allclose(logits, expected, atol=1e-5)


def test_tp_layouts_the_shard_refuses():
    from roofprof.distributed.tp_model import check_tp, shard_spec

    with pytest.raises(ConfigError, match="attention heads"):
        check_tp(TINY, 3)
    s = shard_spec(TINY, 2)
    assert (s.num_heads, s.num_kv_heads, s.intermediate_size, s.vocab_size) == (2, 1, 64, 50)


def test_sequence_parallel_norms_take_rows_over_tp():
    base = dict(prompt_tokens=64, dtype="bf16")
    plain = {
        o.name: o
        for o in ops(Scenario.of("llama-3.1-8b", "prefill", parallel=Parallel(tp=4), **base)).ops
    }
    sp = {
        o.name: o
        for o in ops(
            Scenario.of(
                "llama-3.1-8b", "prefill", parallel=Parallel(tp=4, sequence_parallel=True), **base
            )
        ).ops
    }
    for name in ("attn_norm", "mlp_norm"):
        assert sp[name].m == plain[name].m // 4 and sp[name].flops == pytest.approx(
            plain[name].flops / 4
        )
    assert sp["final_norm"].m == plain["final_norm"].m  # the model-scope norm is not split
    assert sp["q_proj"].m == plain["q_proj"].m


def test_flag_slow_judges_each_metric_against_the_median():
    rows = [
        {"rank": 0, "dram_bytes_per_s": 100.0, "compute_flops_per_s": 10.0},
        {"rank": 1, "dram_bytes_per_s": 100.0, "compute_flops_per_s": 9.6},
        {"rank": 2, "dram_bytes_per_s": 96.0, "compute_flops_per_s": 10.0},
        {"rank": 3, "dram_bytes_per_s": 100.0, "compute_flops_per_s": None},
    ]
    out = flag_slow(rows)
    assert [r["slow"] for r in out] == [False, False, False, False]
    assert out[1]["below_median"]["compute_flops_per_s"] == pytest.approx(0.04)
    assert "compute_flops_per_s" not in out[3]["below_median"]
    out = flag_slow(rows, fraction=0.03)
    assert [r["slow_on"] for r in out] == [[], ["compute_flops_per_s"], ["dram_bytes_per_s"], []]


def test_nvml_state_is_a_sentinel_without_a_gpu():
    class Info:
        extra = {}

    class Dev:
        info = Info()

    state = nvml_state(Dev())
    assert (
        state["sm_clock_mhz"] is None
        and state["clock_event_reasons"] is None
        and "no NVML" in state["nvml"]
    )


def test_roofline_all_ranks_two_gloo_ranks(tmp_path, monkeypatch):
    from roofprof.cli import main

    for k in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    assert (
        main(
            [
                "roofline",
                "--all-ranks",
                "--ranks",
                "2",
                "--device",
                "cpu",
                "--plan",
                "test",
                "-o",
                str(tmp_path),
                "--format",
                "json",
            ]
        )
        == 0
    )
    payload = json.loads((tmp_path / "ranks.json").read_text())
    assert [r["rank"] for r in payload["ranks"]] == [0, 1]
    for r in payload["ranks"]:
        assert {
            "dram_bytes_per_s",
            "compute_flops_per_s",
            "sm_clock_mhz",
            "clock_event_reasons",
            "slow",
            "below_median",
            "host",
        } <= set(r)


@pytest.mark.slow
def test_validate_tp_two_gloo_ranks(tmp_path, monkeypatch):
    from roofprof.cli import main

    cache = tmp_path / "cache"
    monkeypatch.setenv("ROOFPROF_CACHE", str(cache))
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 16,
                "vocab_size": 128,
                "tie_word_embeddings": True,
                "max_position_embeddings": 256,
            }
        )
    )
    out = tmp_path / "tp.json"
    rc = main(
        [
            "validate",
            "--tp",
            "2",
            "--device",
            "cpu",
            "--model",
            str(cfg),
            "--prompt",
            "8",
            "--steps",
            "2",
            "--repeats",
            "1",
            "--budget",
            "0.01",
            "--roofline",
            "none",
            "-o",
            str(out),
            "--format",
            "json",
        ]
    )
    assert rc == 0
    d = json.loads(out.read_text())
    assert d["tp"] == 2 and d["max_abs_logit_diff"] < 1e-3
    labels = [row["estimator"] for row in d["comparison"]]
    assert labels[:1] == ["measured"] and labels[-1] == "real"
    assert d["comparison"][0]["ttft_residual"] is not None
    assert {c["op"] for c in d["collectives"]} == {"all_reduce", "all_gather"}
    assert d["predicted_communication"]["measured"]["decode_s"] > 0
    # the per-rank ops were profiled on both ranks at once, and none of those times (taken
    # under the ranks' own contention) reached the measurement cache
    assert d["profile_ranks"] == "together"
    assert any("profiled on all 2 ranks at once" in n for n in d["notes"])
    # a CPU rank's Python between the kernels is counted, as in single-rank validation
    assert any(n.startswith("framework overhead of plain torch") for n in d["notes"])
    # one rank's ops and the collectives, op by op; the collectives priced, not profiled
    ops = {o["name"]: o for o in d["predictions"]["measured"]["ops"]}
    assert {"lm_head", "attn_allreduce", "logits_gather"} <= set(ops)
    assert ops["attn_allreduce"]["bound"] == "communication"
    # every collective of both passes timed in the pass's rhythm, and those times price the
    # measured estimator's collectives; the back-to-back pricing stands beside it
    rhythm = {(p["phase"], p["name"]): p for p in d["collectives_in_rhythm"]}
    assert set(rhythm) == {
        (phase, name)
        for phase in ("prefill", "decode")
        for name in ("embedding_allreduce", "attn_allreduce", "mlp_allreduce", "logits_gather")
    }
    assert all(p["seconds"] > 0 and not p["skipped"] for p in rhythm.values())
    priced = {
        (o["phase"], o["name"]): o["seconds_per_call"]
        for o in d["predictions"]["measured"]["ops"]
        if o["kind"] == "communication"
    }
    assert priced == {k: p["seconds"] for k, p in rhythm.items()}
    # ... and each segment's ops cost the slowest rank's median replay of them, while the
    # per-op row keeps their profiled times
    per_call = {
        label: {(o["phase"], o["name"]): o["seconds_per_call"] for o in pred["ops"]}
        for label, pred in d["predictions"].items()
    }
    for (phase, _), p in rhythm.items():
        segment = [(phase, name) for name in p["segment_ops"]]
        replayed = sum(per_call["measured"][k] for k in segment)
        assert replayed == pytest.approx(max(p["segment_median_s"]), rel=1e-9)
        profiled = sum(per_call["measured-per-op"][k] for k in segment)
        assert all(
            per_call["measured"][k]
            == pytest.approx(per_call["measured-per-op"][k] * replayed / profiled, rel=1e-9)
            for k in segment
        )
    assert {"measured-per-op", "measured-back-to-back"} <= set(labels)
    # the real passes timed again after the profile: the real run is the median of both, and
    # each residual is judged against the drift between them
    assert len(d["prefill_after_samples_s"]) == len(d["prefill_samples_s"]) == 1
    both = sorted([*d["prefill_samples_s"], *d["prefill_after_samples_s"]])
    assert d["real"]["prefill_s"] == pytest.approx(sum(both) / 2)
    assert set(d["host_drift"]) == {"prefill", "decode"}
    row = d["comparison"][0]
    assert row["prefill_noise_band"] >= d["host_drift"]["prefill"]
    assert row["ttft_within_noise"] == (abs(row["ttft_residual"]) <= row["prefill_noise_band"])
    assert any(n.startswith("the real passes timed before the profile") for n in d["notes"])
    assert any(n.startswith("collectives timed in each pass's rhythm") for n in d["notes"])
    stored = [json.loads(f.read_text()) for f in cache.glob("measurements-*.json")]
    assert not any(stored), "the ranks' contended times must not be cached"


def test_an_unknown_rank_profile_is_refused_with_the_choices(capsys):
    from roofprof.cli import main

    rc = main("validate --tp 2 --device cpu -m llama-3.2-1b --rank-profile sideways".split())
    err = capsys.readouterr().err
    assert rc == 2 and "sideways" in err and "together, alone" in err
    assert len(err.strip().splitlines()) == 1


def test_each_shape_takes_the_slowest_ranks_time():
    from roofprof.distributed.tp_validate import slowest_rank_times
    from roofprof.prediction.estimators import OpTime

    a, b = ("gemm", 1), ("norm", 2)
    per_rank = [
        {a: OpTime(1e-3, "torch", contended=True), b: OpTime(5e-4, "torch")},
        {a: OpTime(3e-3, "numba", note="noisy"), b: OpTime(4e-4, "torch")},
    ]
    merged = slowest_rank_times(per_rank)
    assert merged[a].seconds == 3e-3 and merged[a].impl == "numba"
    assert merged[a].note.startswith("noisy; profiled on all 2 ranks")
    assert merged[b].seconds == 5e-4 and not merged[a].contended
