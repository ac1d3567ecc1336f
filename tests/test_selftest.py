"""roofprof selftest without a GPU: target arithmetic from literal records, the markdown table,
the benchmark plan, the CLI's no-GPU exit, and a time-boxed run on the numpy fake GPU."""

from __future__ import annotations

import copy
import json

import pytest
from fakegpu import fake_device

from roofprof import selftest as S
from roofprof.cli import main
from roofprof.selftest.sections import _failed_paths
from roofprof.selftest.state import RunState

SPEC = {
    "id": "h100-sxm",
    "memory_bytes_per_s": 3.35e12,
    "vector_clock_mhz": 1980.0,
    "tensor_clock_mhz": 1830.0,
    "sm_count": 132,
    "peak_flops_per_s": {"fp32": 66.9e12, "bf16": 989.4e12, "fp64": 33.5e12},
}


def rec(
    impl,
    op,
    median_s,
    *,
    dtype="bf16",
    phase="decode",
    batch=1,
    model="llama-3.1-8b",
    nbytes=1e9,
    flops=1e9,
    count=1,
    status="ok",
    m=None,
):
    return {
        "impl": impl,
        "op": op,
        "median_s": median_s,
        "dtype": dtype,
        "phase": phase,
        "batch": batch,
        "model": model,
        "bytes": nbytes,
        "flops": flops,
        "count": count,
        "status": status,
        "m": m if m is not None else (512 if phase == "prefill" else batch),
    }


def ceiling(probe, value, *, kind="memory", level=None, dtype=None, probe_kind=None, clock=None):
    return {
        "name": f"{level or dtype} {probe}",
        "probe": probe,
        "kind": kind,
        "level": level,
        "dtype": dtype,
        "probe_kind": probe_kind or ("bandwidth" if kind == "memory" else "compute"),
        "value": value,
        "clock_mhz": clock,
    }


def good_results():
    ceilings = [
        ceiling("read", 3.1e12, level="dram"),
        ceiling("copy", 2.9e12, level="dram"),
        ceiling("d2d-copy", 2.8e12, level="dram"),
        ceiling(
            "fma-fp32", 0.97 * 132 * 128 * 2 * 1755e6, kind="compute", dtype="fp32", clock=1755
        ),
        ceiling("mma.sync-bf16", 600e12, kind="compute", dtype="bf16", clock=1755),
        ceiling("gemm-bf16", 700e12, kind="compute", dtype="bf16", probe_kind="gemm", clock=1755),
    ]
    records = [
        # 8B decode b1 bf16: cupy streams at 2.9 TB/s (0.94 of read), torch slower
        rec("cupy", "q_proj", 1e-3, nbytes=2.9e9, count=32),
        rec("cupy", "down_proj", 2e-3, nbytes=5.8e9, count=32),
        rec("torch", "q_proj", 1.1e-3, nbytes=2.9e9, count=32),
        rec("torch", "down_proj", 2.1e-3, nbytes=5.8e9, count=32),
        rec("cublas", "q_proj", 1.05e-3, nbytes=2.9e9, count=32),
        rec("numba", "q_proj", 1.2e-3, dtype="fp16", nbytes=2.9e9, count=32),
        # 8B prefill bf16: gemm_mma at 0.6 of cuBLAS
        rec("cupy", "gate_proj", 1e-3, phase="prefill", flops=4e11),
        rec("cublas", "gate_proj", 0.6e-3, phase="prefill", flops=4e11),
        # 8B prefill fp32 numba GEMM at 30 TFLOP/s vs ~52 TFLOP/s FMA
        rec("numba", "gate_proj", 1e-3, dtype="fp32", phase="prefill", flops=30e9),
        # prefill lm_head runs on the last token (M = batch): a GEMV, left out of the GEMM targets
        rec("numba", "lm_head", 1.0, dtype="fp32", phase="prefill", flops=1e9, m=1),
        rec("cupy", "lm_head", 1.0, phase="prefill", flops=1e9, m=1),
        rec("cublas", "lm_head", 1e-3, phase="prefill", flops=1e9, m=1),
    ]
    return {
        "spec": dict(SPEC),
        "device": {"compute_units": 132, "name": "NVIDIA H100 80GB HBM3", "label": "cuda:0"},
        "roofline": {"ceilings": ceilings},
        "benchmarks": {"records": records},
        "correctness": {"kernels": [{"kernel": "gemv_bf16_m1", "ok": True, "note": ""}]},
        "counters": {"passed": True, "checks": {"a": True}},
        "pytest": {"returncode": 0, "summary": "3 passed"},
    }


def by_id(results):
    return {t.id: t for t in S.evaluate_targets(results)}


def test_all_targets_pass_on_good_numbers():
    t = by_id(good_results())
    assert all(x.passed for x in t.values()), {
        k: (v.value, v.detail) for k, v in t.items() if not v.passed
    }
    assert t["hbm_vs_datasheet"].value == pytest.approx(3.1e12 / 3.35e12)
    assert t["hbm_vs_d2d"].value == pytest.approx(3.1 / 2.8)
    assert t["fp32_fma"].value == pytest.approx(0.97)
    assert t["bf16_attainable"].value == pytest.approx(1.0)
    assert t["cupy_gemv_hbm"].value == pytest.approx((2.9e9 + 5.8e9) / 3e-3 / 3.1e12)
    assert t["cupy_gemv_vs_torch"].value == pytest.approx(3.2 / 3.0)
    assert t["mma_gemm_vs_cublas"].value == pytest.approx(0.6)
    assert t["numba_gemv_hbm"].value == pytest.approx(2.9e9 / 1.2e-3 / 3.1e12)
    assert t["numba_gemm_fp32"].value == pytest.approx(30e12 / (0.97 * 132 * 128 * 2 * 1755e6))


@pytest.mark.parametrize(
    "change, target",
    [
        (
            lambda r: (
                r["roofline"]["ceilings"][0].update(value=2.9e12)
                or r["roofline"]["ceilings"][1].update(value=2.9e12)
            ),
            "hbm_vs_datasheet",
        ),
        (lambda r: r["roofline"]["ceilings"][2].update(value=3.2e12), "hbm_vs_d2d"),
        (
            lambda r: r["roofline"]["ceilings"][3].update(value=0.9 * 132 * 128 * 2 * 1755e6),
            "fp32_fma",
        ),
        (
            lambda r: r["benchmarks"]["records"].append(
                rec("torch", "gate_proj", 0.4e-3, phase="prefill", flops=4e11)
            ),
            "bf16_attainable",
        ),
        (
            lambda r: (
                r["benchmarks"]["records"][0].update(median_s=3e-3)
                or r["benchmarks"]["records"][2].update(median_s=4e-3)
            ),
            "cupy_gemv_hbm",
        ),
        (lambda r: r["benchmarks"]["records"][2].update(median_s=0.5e-3), "cupy_gemv_vs_torch"),
        (lambda r: r["benchmarks"]["records"][5].update(median_s=2e-3), "numba_gemv_hbm"),
        (lambda r: r["benchmarks"]["records"][6].update(median_s=1.3e-3), "mma_gemm_vs_cublas"),
        (lambda r: r["benchmarks"]["records"][8].update(median_s=2e-3), "numba_gemm_fp32"),
        (
            lambda r: r["correctness"]["kernels"].append(
                {"kernel": "gemm_mma_bf16_bf16", "ok": False}
            ),
            "correctness",
        ),
        (lambda r: r["counters"].update(passed=False), "counters"),
        (lambda r: r["pytest"].update(returncode=1), "pytest_gpu"),
    ],
)
def test_each_target_fails_on_its_own_bad_number(change, target):
    r = copy.deepcopy(good_results())
    change(r)
    t = by_id(r)
    assert t[target].passed is False, (target, t[target])
    assert [k for k, v in t.items() if v.passed is False] == [target]


def test_missing_inputs_are_not_measured():
    t = by_id({})
    assert all(x.passed is None for x in t.values())
    assert S.status_word(None) == "not measured"


def test_fp32_lanes_come_from_the_datasheet():
    a100 = {"peak_flops_per_s": {"fp32": 19.5e12}, "sm_count": 108, "vector_clock_mhz": 1410}
    assert S.fp32_lanes_per_sm(a100) == 64.0
    r = good_results()
    r["spec"] = {**a100, "memory_bytes_per_s": 2.0e12}
    r["device"]["compute_units"] = 108
    r["roofline"]["ceilings"][3].update(value=0.96 * 108 * 64 * 2 * 1410e6, clock_mhz=1410)
    assert by_id(r)["fp32_fma"].value == pytest.approx(0.96)


def test_aggregate_uses_only_common_ops_for_comparisons():
    recs = [
        rec("cupy", "a", 1.0),
        rec("cupy", "b", 1.0),
        rec("torch", "a", 2.0),
        rec("torch", "b", 0.0, status="failed"),
    ]
    assert S.common_ops(recs, ("cupy", "torch"), model="llama-3.1-8b") == ["a"]
    agg = S.aggregate(
        recs, impl="cupy", model="llama-3.1-8b", phase="decode", dtype="bf16", ops=["a"]
    )
    assert agg.time_s == 1.0 and agg.ops == ("a",)
    assert (
        S.aggregate(recs, impl="numba", model="llama-3.1-8b", phase="decode", dtype="bf16") is None
    )


def test_clock_scaled_ceilings():
    rows = S.clock_scaled(good_results()["roofline"]["ceilings"], SPEC)
    mma = next(r for r in rows if r["probe"] == "mma.sync-bf16")
    assert mma["spec_clock_mhz"] == 1830.0 and mma["value_at_spec_clock"] == pytest.approx(
        600e12 * 1830 / 1755
    )
    fma = next(r for r in rows if r["probe"] == "fma-fp32")
    assert fma["spec_clock_mhz"] == 1980.0
    assert fma["percent_of_spec"] == pytest.approx(100 * fma["value_at_spec_clock"] / 66.9e12)
    assert all(
        r["value_at_spec_clock"] is None
        for r in S.clock_scaled([ceiling("x", 1.0, kind="compute", dtype="fp32")], SPEC)
    )


def test_markdown_table_has_a_row_per_target():
    r = good_results()
    r["pytest"]["returncode"] = 1
    r["targets"] = [t.to_dict() for t in S.evaluate_targets(r)]
    r["sections"] = {"correctness": {"status": "ok", "elapsed_s": 1.0, "note": "1/1 passed"}}
    md = S.markdown_report(r)
    assert md.startswith("# roofprof selftest: NVIDIA H100 80GB HBM3 (cuda:0)")
    rows = [line for line in md.splitlines() if line.startswith("| ") and "**" in line]
    assert len(rows) == len(r["targets"])
    assert any("pytest -m gpu" in row and "**FAIL**" in row for row in rows)
    assert sum("**pass**" in row for row in rows) == len(rows) - 1
    assert "| correctness | ok | 1.0 | 1/1 passed |" in md


def test_benchmark_plan_and_llama_shapes():
    quick = S.benchmark_plan(quick=True)
    full = S.benchmark_plan(quick=False)
    assert quick[0] == S.BenchCase("llama-3.1-8b", "decode", 1, "bf16", ("cupy", "cublas", "torch"))
    assert {c.model for c in full} == set(S.MODELS)
    assert {c.batch for c in full if c.phase == "decode"} == {1, 16, 64, 256}
    assert full[:4] == quick[:4] and len(set(full)) == len(full)
    ops = {op.name: op for op in S.gemm_ops(quick[0])}
    # identical shapes are measured once, with their counts summed (8B: q_proj and o_proj are
    # both 4096×4096)
    assert set(ops) == {
        "q_proj+o_proj",
        "k_proj+v_proj",
        "gate_proj+up_proj",
        "down_proj",
        "lm_head",
    }
    assert ops["k_proj+v_proj"].count == 64 and (
        ops["k_proj+v_proj"].n,
        ops["k_proj+v_proj"].k,
    ) == (1024, 4096)
    assert ops["lm_head"].count == 1 and ops["q_proj+o_proj"].m == 1
    prefill = {op.name: op for op in S.gemm_ops(quick[2])}
    assert prefill["q_proj+o_proj"].m == S.PROMPT_TOKENS and prefill["lm_head"].m == 1


def test_cli_without_gpu_exits_2_with_a_one_line_reason(tmp_path, capsys, monkeypatch):
    from roofprof import devices

    monkeypatch.setattr(
        devices, "cuda_devices", lambda: ([], "no NVIDIA driver (NVML library not found)")
    )
    out = tmp_path / "st"
    assert main(["selftest", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "no usable GPU" in err and "pip install 'roofprof[cuda12]'" in err
    assert not out.exists()
    assert main(["selftest", "--skip", "nonsense"]) == 2
    assert "unknown section" in capsys.readouterr().err


def tiny_model(tmp_path):
    cfg = {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "head_dim": 64,
    }
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_selftest_on_the_fake_gpu_writes_whole_results(tmp_path):
    dev = fake_device()
    model = tiny_model(tmp_path)
    cases = [
        S.BenchCase(model, "decode", 1, "fp16", ("cupy", "cublas", "numba")),
        S.BenchCase(model, "prefill", 1, "fp16", ("cupy", "cublas"), prompt_tokens=32),
    ]
    res = S.run_selftest(
        tmp_path / "out",
        device=dev,
        sections=("roofline", "benchmarks"),
        budget_s=60,
        roofline_plan="test",
        bench_cases=cases,
    )
    saved = json.loads((tmp_path / "out" / "selftest.json").read_text())
    assert saved["schema"] == S.SCHEMA and saved["provenance"]["roofprof_version"]
    assert (
        saved["sections"]["roofline"]["status"] == "ok"
        and saved["sections"]["correctness"]["status"] == "skipped"
    )
    assert (tmp_path / "out" / "selftest_roofline.json").is_file()
    names = {c["probe"] for c in saved["roofline"]["ceilings"]}
    assert {"read", "copy", "fma-fp32", "mma.sync-bf16", "d2d-copy", "smem"} <= names
    recs = saved["benchmarks"]["records"]
    assert {r["status"] for r in recs if r["impl"] == "numba"} == {
        "unsupported"
    }  # simulator on here
    ok = [r for r in recs if r["status"] == "ok"]
    assert ok and all(r["check"]["ok"] for r in ok)
    fields = {
        "status",
        "median_s",
        "min_s",
        "cv",
        "noisy",
        "repeats",
        "flush",
        "kernels",
        "note",
        "check",
        "bytes_per_s",
        "flops_per_s",
    }
    assert all(
        fields <= set(r) and "timing" not in r and r["repeats"] >= 5 for r in ok
    )  # selftest.json's shape
    assert any(r.get("vs_cublas") for r in ok if r["impl"] == "cupy")
    assert saved["clock_scaled"] and len(saved["targets"]) == len(res["targets"])
    md = (tmp_path / "out" / "selftest.md").read_text()
    assert "## Targets" in md and "## Ceilings" in md and "## Llama shapes" in md


def test_sections_stop_at_their_deadline_and_keep_what_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "MIN_SECTION_S", 0.0)
    dev = fake_device()
    cases = [S.BenchCase(tiny_model(tmp_path), "decode", 1, "fp16", ("cupy",))]
    res = S.run_selftest(
        tmp_path / "o",
        device=dev,
        sections=("roofline", "benchmarks"),
        budget_s=1e-3,
        roofline_plan="test",
        bench_cases=cases,
    )
    assert res["sections"]["roofline"]["status"] == "timeout"
    assert res["sections"]["benchmarks"]["status"] == "timeout"
    assert not res["complete"]
    saved = json.loads((tmp_path / "o" / "selftest.json").read_text())
    assert saved["complete"] is False and saved["sections"]["roofline"]["status"] == "timeout"


def test_failed_kernels_are_never_timed():
    st = RunState(out=None, budget_s=1, quick=True, progress=lambda m: None)
    st.results["correctness"] = {
        "kernels": [
            {"kernel": "gemv_splitk_reduce_bf16", "ok": False},
            {"kernel": "numba gemm_tiled_fp32", "ok": False},
            {"kernel": "numba read_fp32", "ok": False},
            {"kernel": "impl cublas fp16 1×4096×4096", "ok": False},
            {"kernel": "gemm_mma_fp16_f32", "ok": True},
        ]
    }
    assert _failed_paths(st) == {("cupy", "bf16"), ("numba", "fp32"), ("cublas", "fp16")}
