"""Tensor and pipeline parallelism: per-rank shapes, collectives, memory fit, CLI."""

import json

import pytest

from roofprof import predict
from roofprof.cli import main
from roofprof.errors import ConfigError
from roofprof.models import ops
from roofprof.prediction.collectives import (
    CollectiveModel,
    algbw,
    busbw,
    busbw_factor,
    load_collectives,
    published_collectives,
)
from roofprof.prediction.memory_fit import fit_memory, smallest_tp
from roofprof.specs import load_gpu
from roofprof.workload import COLLECTIVE_FNS, Parallel, Scenario


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- nccl-tests


def test_busbw_factors_match_nccl_tests():
    # doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, else 1
    assert busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert busbw_factor("all_reduce", 2) == 1.0
    assert busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert (
        busbw_factor("send", 2) == busbw_factor("broadcast", 8) == busbw_factor("reduce", 8) == 1.0
    )
    assert busbw_factor("all_reduce", 1) == 0.0
    with pytest.raises(ConfigError):
        busbw_factor("gossip", 2)


def test_documented_examples():
    # a row as nccl-tests prints it: 8 GPUs, all_reduce of 128 MiB (33554432 floats) in 1316.9 us
    # -> algbw 101.92 GB/s, busbw = algbw x 2(n-1)/n = 178.36 GB/s (GB = 1e9 B, PERFORMANCE.md)
    size = 33554432 * 4
    assert algbw(size, 1316.9e-6) / 1e9 == pytest.approx(101.92, abs=0.01)
    assert busbw("all_reduce", size, 1316.9e-6, 8) / 1e9 == pytest.approx(178.36, abs=0.01)
    # all-gather: S is the total output buffer (sendcount x eltsize x n); factor (n-1)/n
    assert busbw("all_gather", 8 * 2**20 * 8, 1e-3, 8) == pytest.approx(
        8 * 2**20 * 8 / 1e-3 * 7 / 8
    )


def test_alpha_beta_priors_and_nvls():
    h100 = CollectiveModel.for_gpu("h100-sxm")
    assert h100.bus_bytes_per_s("all_reduce", 8) == 480e9  # NVLS from 5 GPUs
    assert h100.bus_bytes_per_s("all_reduce", 4) == 365e9  # ring below that
    assert h100.bus_bytes_per_s("all_gather", 8) == 365e9  # NVLS speeds all-reduce only
    big = 2**31
    t = h100.seconds("all_reduce", big, 8)
    assert busbw("all_reduce", big, t, 8) == pytest.approx(480e9, rel=0.01)
    assert h100.seconds("allreduce", 16384, 8) == pytest.approx(
        h100.alpha_s, rel=0.01
    )  # latency-bound
    assert h100.seconds("all_reduce", 1e6, 1) == 0.0
    assert CollectiveModel.for_gpu("h100-sxm", graphs=True).alpha_s < h100.alpha_s
    # no published figure: derived from the link rate, and said so
    l4 = CollectiveModel.for_gpu("l4")
    assert l4.notes and l4.ring_busbw_bytes_per_s < 40e9


def test_published_figures_are_cited():
    rows = published_collectives()
    assert len(rows) >= 10
    from roofprof.specs import gpu_sources

    for r in rows:
        assert r["source"] in gpu_sources()
        load_gpu(r["gpu"])
        busbw_factor(r["op"], r["ranks"])
    assert {
        r["busbw_bytes_per_s"] for r in published_collectives("h200") if r["algorithm"] == "nvls"
    } >= {480e9}
    for gid in ("h100-sxm", "h200", "a100-sxm-80gb", "b200", "l40s"):
        ic = load_gpu(gid).interconnect
        assert {
            "nvlink_generation",
            "pcie_generation",
            "nvswitch",
            "nvls_min_gpus",
            "sources",
        } <= set(ic)


def test_measured_table_interpolates_log_log(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "results": [
                    {"op": "all_reduce", "bytes": 1024, "ranks": 2, "seconds": 1e-5},
                    {"op": "all_reduce", "bytes": 1024**2, "ranks": 2, "seconds": 1e-3},
                ]
            }
        )
    )
    table = load_collectives(path)
    assert table.seconds("all_reduce", 32 * 1024, 2) == pytest.approx(1e-4)  # halfway in log-log
    assert table.seconds("all_reduce", 10, 2) == 1e-5  # latency floor
    assert table.seconds("all_reduce", 2 * 1024**2, 2) == pytest.approx(2e-3)
    assert table.seconds("all_gather", 1024, 2) is None
    model = CollectiveModel.for_gpu("h100-sxm", table=table)
    assert model.seconds("allreduce", 32 * 1024, 2) == pytest.approx(1e-4)
    assert model.seconds("all_reduce", 32 * 1024, 4) != pytest.approx(1e-4)  # falls back to priors
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"op": "all_reduce", "bytes": 0, "ranks": 2, "seconds": 1}]))
    with pytest.raises(ConfigError):
        load_collectives(bad)


# --------------------------------------------------------------------------- workload


def _names(w):
    return {op.name: op for op in w.ops}


def test_tp_shapes_and_collectives():
    w = ops(Scenario.of("llama-3.1-70b", "prefill", prompt_tokens=64, parallel=Parallel(tp=8)))
    o = _names(w)
    assert (o["q_proj"].n, o["k_proj"].n, o["o_proj"].k) == (1024, 128, 1024)
    assert (o["gate_proj"].n, o["down_proj"].k, o["lm_head"].n) == (3584, 3584, 16032)
    assert o["attention"].batch == 8  # 64 heads / 8
    comm = [op for op in w.ops if op.fn in COLLECTIVE_FNS]
    assert all(op.kind == "communication" and op.group == "communication" for op in comm)
    per_forward = sum(op.count for op in comm if op.fn == "allreduce")
    assert per_forward == 2 * 80 + 1  # 2L + 1 all-reduces
    assert o["attn_allreduce"].bytes == 64 * 8192 * 2 and o["attn_allreduce"].batch == 8
    assert o["logits_gather"].fn == "all_gather"


def test_kv_heads_replicated_past_their_count():
    o = _names(
        ops(Scenario.of("llama-3.1-70b", "decode", prompt_tokens=64, parallel=Parallel(tp=16)))
    )
    assert o["k_proj"].n == 128  # one KV head per rank: 8 KV heads replicated over 16 ranks


def test_sequence_parallel_and_pipeline():
    w = ops(
        Scenario.of(
            "llama-3.1-8b",
            "prefill",
            prompt_tokens=64,
            parallel=Parallel(tp=2, pp=4, sequence_parallel=True),
        )
    )
    fns = [op.fn for op in w.ops if op.kind == "communication"]
    assert fns.count("reduce_scatter") == 2 and fns.count("all_gather") == 3 and "send" in fns
    send = _names(w)["pp_send"]
    assert send.count == 3 and send.bytes == 2 * 64 * 4096 * 2


def test_tp1_is_unchanged():
    a = ops(Scenario.of("llama-3.1-8b", "decode", prompt_tokens=64))
    b = ops(Scenario.of("llama-3.1-8b", "decode", prompt_tokens=64, parallel=Parallel(1, 1)))
    assert a.ops == b.ops and not any(op.kind == "communication" for op in a.ops)


@pytest.mark.parametrize(
    "layout, match",
    [
        (Parallel(tp=3), "attention heads"),
        (Parallel(tp=128), "attention heads"),
        (Parallel(pp=81), "layers"),
    ],
)
def test_bad_layouts(layout, match):
    with pytest.raises(ConfigError, match=match):
        Scenario.of("llama-3.1-70b", "decode", parallel=layout)


def test_communication_priced_on_the_interconnect():
    p = predict("llama-3.1-70b", gpu="h100-sxm", prompt_tokens=128, parallel=Parallel(tp=8))
    bd = p.decode.breakdown()
    assert 0.15 < bd["communication_share"] < 0.5  # published: 20-45 % of a decode step at TP 8
    assert all(
        o.estimate.bound == "communication" for o in p.decode.ops if o.op.kind == "communication"
    )
    one = predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=128)
    assert "communication_share" not in one.decode.breakdown()


# --------------------------------------------------------------------------- memory


def test_memory_fit_targets():
    def fits(model, tp, dtype="bf16"):
        return fit_memory(
            Scenario.of(model, "decode", prompt_tokens=2048, dtype=dtype, parallel=Parallel(tp=tp)),
            "h100-sxm",
        ).fits

    assert not fits("llama-3.1-70b", 1)
    assert fits("llama-3.1-70b", 2)
    assert fits("llama-3.1-405b", 8, "fp8")
    assert not fits("llama-3.1-405b", 8)
    s = Scenario.of("llama-3.1-70b", "decode", prompt_tokens=2048)
    assert smallest_tp(s, "h100-sxm") == 2
    m = fit_memory(s.replace(parallel=Parallel(tp=2)), "h100-sxm")
    assert set(m.to_dict()) >= {"per_gpu_bytes", "capacity_bytes", "fits", "max_batch"}
    assert m.max_batch >= 1


# --------------------------------------------------------------------------- CLI


def test_cli_tp_json(capsys):
    code, out, _ = run(
        capsys,
        "predict",
        "-m",
        "llama-3.1-70b",
        "-g",
        "h100-sxm",
        "-p",
        "512",
        "--tp",
        "4",
        "--pp",
        "2",
        "-f",
        "json",
    )
    assert code == 0
    d = json.loads(out)
    assert d["parallel"] == {"tp": 4, "pp": 2, "sequence_parallel": False, "gpus": 8}
    assert d["memory"]["fits"] is True
    assert d["pipeline"]["decode"]["stages"] == 2
    assert d["decode"]["breakdown"]["by_kind_seconds"]["communication"] > 0


def test_cli_memory_and_bad_input(capsys):
    code, _, err = run(capsys, "predict", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "1")
    assert code == 2 and "smallest TP that fits is 2" in err and len(err.strip().splitlines()) == 1
    code, _, _ = run(
        capsys, "predict", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "1", "--ignore-memory"
    )
    assert code == 0
    for args, needle in (
        (("--tp", "3"), "attention heads"),
        (("--pp", "100"), "layers"),
        (("--tp", "0"), "--tp"),
        (("--sequence-parallel",), "--tp 2"),
    ):
        code, _, err = run(capsys, "predict", "-m", "llama-3.1-70b", "-g", "h100-sxm", *args)
        assert code == 2 and needle in err, (args, err)


def test_published_tensor_parallel_rows():
    import statistics

    from roofprof.published import validate_published

    v = validate_published(("calibrated",))
    tp = [
        r
        for r in v.rows
        if r["row"]
        in {
            "D03-tp2",
            "D03-tp4",
            "D03-tp8",
            "D05-tp2",
            "D05-tp4",
            "D05-tp8",
            "D11",
            "P03",
            "P04",
            "P09",
            "P12",
        }
    ]
    assert len(tp) == 11
    assert statistics.median(abs(r["calibrated_residual"]) for r in tp) <= 0.15  # target
    assert not any("tensor parallelism" in s.reason for s in v.skipped)
