"""FLOP and byte arithmetic, the per-architecture table, analytic comparison, placement by level.

Records here are built from literal metric dicts (synthetic values, stated per test) or
from the real fixtures; expected values are computed by hand in the comments.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from roofprof import counters as c
from roofprof.counters.collection import base_metric_name
from roofprof.counters.hierarchical import expected_pipes
from roofprof.errors import ConfigError

FIX = Path(__file__).resolve().parent / "fixtures"
GEMM = FIX / "ncu_details_RTX5070_ncu2026.2_Olajide-Badejo_gemm_tiled.csv"
SAXPY = FIX / "ncu_details_RTX5070_ncu2026.2_Olajide-Badejo_saxpy.csv"
S = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"
T = "sm__ops_path_tensor_{}.sum"


def k(
    metrics: dict, cc: str | None = "9.0", name: str = "k", ranges: tuple = ()
) -> c.KernelCounters:
    return c.KernelCounters(
        0, name, {m: (float(v), u) for m, (v, u) in metrics.items()}, ranges, cc
    )


def test_cuda_core_flops_add_mul_2fma():
    rec = k(
        {
            S.format("dadd"): (10, "inst"),
            S.format("dmul"): (20, "inst"),
            S.format("dfma"): (30, "inst"),
            S.format("ffma"): (1000, "inst"),
            S.format("hadd"): (5, "inst"),
            S.format("hmul"): (0, "inst"),
            S.format("hfma"): (5, "inst"),
        }
    )
    # fp64: 10 + 20 + 2*30 = 90; fp32: 2*1000 = 2000; fp16: 5 + 0 + 2*5 = 15
    assert rec.cuda_core_flops == {"fp64": 90, "fp32": 2000, "fp16": 15}
    assert rec.flops == 90 + 2000 + 15
    assert rec.dominant_pipe == "cuda:fp32" and rec.roofline_dtype == "fp32"


def test_saxpy_flop_and_byte_arithmetic_hand_computed():
    """The saxpy fixture's bytes with the FLOP counter it would have had (synthetic: the file has
    none): one FFMA per element, n = 2^24, so 2n FLOPs; DRAM from the real file."""
    (real,) = c.read_ncu_csv(SAXPY)
    n = 65536 * 256
    rec = c.KernelCounters(
        0, real.name, {**real.metrics, S.format("ffma"): (float(n), "inst")}, cc=real.cc
    )
    assert rec.flops == 2 * n == 33_554_432
    assert rec.intensity("dram") == pytest.approx(33_554_432 / 177_852_672)  # 0.1887 FLOP/B
    assert rec.intensity("l1") == pytest.approx(33_554_432 / 201_326_592)  # 1/6: 2 FLOP per 12 B
    assert rec.intensity("l2") is None
    assert rec.flops_per_s == pytest.approx(33_554_432 / 292_928e-9)


def test_hopper_tensor_ops_count_as_flops():
    m = n = kk = 4096
    rec = k(
        {
            T.format("src_bf16_dst_fp32"): (2 * m * n * kk, ""),
            "gpu__time_duration.sum": (200, "usecond"),
            "dram__bytes_read.sum": (64, "Mbyte"),
            "dram__bytes_write.sum": (32, "Mbyte"),
            "sm__inst_executed_pipe_tensor.sum": (123, "inst"),
        }
    )
    assert rec.tensor_flops == {"bf16": 2 * m * n * kk}
    assert rec.flops_by_pipe == {"tensor:bf16": 137_438_953_472}
    assert rec.tensor_instructions == 123  # a diagnostic, never converted after Volta
    assert rec.intensity("dram") == pytest.approx(137_438_953_472 / 96e6)
    assert rec.flops_per_s == pytest.approx(137_438_953_472 / 200e-6)


def test_total_and_parts_never_counted_twice():
    both = k(
        {
            T.format("src_bf16_dst_fp32"): (100, ""),
            T.format("op_hgmma_src_bf16_dst_fp32_sparsity_off"): (90, ""),
            T.format("op_hmma_src_bf16_dst_fp32_sparsity_off"): (10, ""),
        }
    )
    assert both.tensor_flops == {"bf16": 100}
    parts = k(
        {
            T.format("op_hgmma_src_bf16_dst_fp32_sparsity_off"): (90, ""),
            T.format("op_hmma_src_bf16_dst_fp32_sparsity_off"): (10, ""),
        }
    )
    assert parts.tensor_flops == {"bf16": 100}
    assert parts.tensor_source("bf16")[0][0].startswith("sm__ops_path_tensor_op_hgmma")
    fp16 = k(
        {
            T.format("src_fp16_dst_fp16"): (3, ""),
            T.format("src_fp16_dst_fp32"): (4, ""),
            T.format("src_fp16"): (7, ""),
        }
    )
    assert fp16.tensor_flops == {"fp16": 7}


def test_volta_instruction_count_times_512():
    rec = k({"sm__inst_executed_pipe_tensor.sum": (1000, "inst")}, cc="7.0")
    assert rec.family == "volta" and rec.tensor_flops == {"fp16": 512_000}
    later = k({"sm__inst_executed_pipe_tensor.sum": (1000, "inst")}, cc="8.0")
    assert later.tensor_flops == {} and later.flops is None
    unknown = k(
        {"sm__inst_executed_pipe_tensor.sum": (1000, "inst"), T.format("src_int8"): (5, "")},
        cc=None,
    )
    assert unknown.tensor_flops == {"int8": 5}


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ("7.0", "volta"),
        ("7.5", "turing"),
        ("8.0", "ampere"),
        ("8.6", "ampere"),
        ("8.9", "ada"),
        ("9.0", "hopper"),
        ("10.0", "blackwell"),
        ("12.0", "blackwell"),
        ((9, 0), "hopper"),
        ("sm_90", "hopper"),
        ("90", "hopper"),
        ("6.1", None),
        (None, None),
        ("junk", None),
    ],
)
def test_family_for_cc(cc, family):
    assert c.family_for_cc(cc) == family


def test_tensor_table_is_data_with_every_issue_dtype():
    hopper = c.TENSOR_METRICS["hopper"]
    assert set(hopper) == {"bf16", "fp16", "tf32", "fp8", "int8", "fp64"}
    for family, table in c.TENSOR_METRICS.items():
        for dtype, alts in table.items():
            for alt in alts:
                for name, factor in alt:
                    assert name.endswith(".sum") and "__" in name, (family, dtype, name)
                    assert factor == (512.0 if family == "volta" else 1.0)


def test_bytes_sector_fallbacks_and_units():
    rec = k(
        {
            "lts__t_sectors.sum": (10, "sector"),
            "l1tex__t_bytes.sum": (1, "Kbyte"),
            "dram__bytes.sum": (2, "Gbyte"),
        }
    )
    assert rec.l2_bytes == 320 and rec.l1_bytes == 1000 and rec.dram_bytes == 2e9
    assert rec.dram_read_bytes is None  # only the total
    assert rec.bytes_at("l2") == 320
    with pytest.raises(ConfigError, match="valid choices: l1, l2, dram"):
        rec.bytes_at("l3")


def test_plan_metrics_verified_against_query():
    available = {
        base_metric_name(m)
        for m in (
            "gpu__time_duration.sum",
            "dram__bytes_op_read.sum",
            "dram__bytes_op_write.sum",
            "lts__t_bytes.sum",
            "l1tex__t_bytes.sum",
            S.format("ffma"),
            S.format("fadd"),
            T.format("src_bf16_dst_fp32"),
        )
    }
    plan = c.plan_metrics("hopper", "hierarchical", available)
    assert "dram__bytes_op_read.sum" in plan.metrics and "dram__bytes_read.sum" not in plan.metrics
    assert T.format("src_bf16_dst_fp32") in plan.metrics
    assert S.format("dfma") in plan.dropped and T.format("src_tf32_dst_fp32") in plan.dropped
    assert "sm__inst_executed_pipe_tensor.sum" not in plan.dropped  # optional diagnostic
    assert all(base_metric_name(m) in available for m in plan.metrics)
    unverified = c.plan_metrics("hopper")
    assert unverified.dropped == () and unverified.metrics[0] == "gpu__time_duration.sum"
    assert T.format("src_fp8") in unverified.metrics
    assert c.plan_metrics("hopper", "time").metrics == ("gpu__time_duration.sum",)
    with pytest.raises(ConfigError, match="valid choices: hierarchical, memory, flops, time"):
        c.plan_metrics("hopper", "everything")


def test_expected_pipes():
    assert expected_pipes("gemm", "bf16") == ("tensor:bf16",)
    assert expected_pipes("attention", "fp8") == ("tensor:fp8",)
    assert expected_pipes("elementwise", "bf16") == ("cuda:fp32", "cuda:fp16")
    assert expected_pipes("gemm", "fp32") == ("cuda:fp32",)
    assert expected_pipes("gemm", "fp64") == ("tensor:fp64", "cuda:fp64")


def test_compare_with_ops_on_the_real_fixtures():
    """Analytic minimum bytes: GEMM 3*2048^2*4 B, saxpy 12*2^24 B (no FLOP counters in the
    files)."""
    records = c.read_ncu_csv(GEMM) + c.read_ncu_csv(SAXPY)
    ops = [
        SimpleNamespace(
            name=records[0].name,
            kind="gemm",
            dtype="fp32",
            flops=2 * 2048**3,
            bytes=3 * 2048**2 * 4,
        ),
        SimpleNamespace(
            name=records[1].name,
            kind="elementwise",
            dtype="fp32",
            flops=2 * 2**24,
            bytes=12 * 2**24,
        ),
        SimpleNamespace(name="not profiled", kind="norm", dtype="bf16", flops=1, bytes=1),
    ]
    gemm, saxpy = c.compare_with_ops(records, ops)
    assert gemm.excess_traffic == pytest.approx(
        56_639_232 / 50_331_648
    )  # 1.125: 12.5% above the minimum
    assert gemm.flags == ("no_flop_counters", "excess_traffic")
    assert saxpy.excess_traffic == pytest.approx(
        177_852_672 / 201_326_592
    )  # 0.883: y partly still in L2
    assert saxpy.flags == ("no_flop_counters", "below_min_bytes")
    assert gemm.flop_ratio is None and gemm.time_s == pytest.approx(10_195_552e-9)


def test_compare_with_ops_several_kernels_per_range_and_pipes():
    """Synthetic: 'q_proj' ran as a GEMM plus a split-K reduction, 'o_proj' on CUDA cores."""
    mnk = 2 * 4096 * 4096 * 4096
    recs = [
        k(
            {
                T.format("src_bf16_dst_fp32"): (mnk, ""),
                "dram__bytes.sum": (100e6, "byte"),
                "gpu__time_duration.sum": (1, "msecond"),
            },
            ranges=("roofprof.q_proj",),
            name="gemm",
        ),
        k(
            {
                S.format("fadd"): (0.02 * mnk, "inst"),
                "dram__bytes.sum": (40e6, "byte"),
                "gpu__time_duration.sum": (10, "usecond"),
            },
            ranges=("roofprof.q_proj",),
            name="reduce",
        ),
        k(
            {
                S.format("ffma"): (mnk / 2, "inst"),
                "dram__bytes.sum": (101e6, "byte"),
                "gpu__time_duration.sum": (20, "msecond"),
            },
            ranges=("roofprof.o_proj",),
            name="sgemm",
        ),
    ]
    ops = [
        SimpleNamespace(name=n, kind="gemm", dtype="bf16", flops=mnk, bytes=100.66e6)
        for n in ("q_proj", "o_proj")
    ]
    q, o = c.compare_with_ops(recs, ops)
    assert (
        q.kernels == 2
        and q.counter_flops == pytest.approx(1.02 * mnk)
        and q.flop_ratio == pytest.approx(1.02)
    )
    assert q.expected_pipe_fraction == pytest.approx(1 / 1.02)
    assert q.excess_traffic == pytest.approx(140e6 / 100.66e6) and q.flags == ("excess_traffic",)
    assert q.time_s == pytest.approx(1.01e-3)
    assert o.expected_pipe_fraction == 0.0 and o.flags == ("off_expected_pipe",)
    (half,) = c.compare_with_ops(recs[:2], ops[:1], calls=2)
    assert half.counter_flops == pytest.approx(0.51 * mnk) and "flops_off" in half.flags
    with pytest.raises(ConfigError):
        c.compare_with_ops(recs, ops, calls=0)


def test_place_hierarchical_on_a_roofline():
    from roofprof.roofline import Ceiling, Roofline

    roof = Roofline(
        "test-gpu",
        (
            Ceiling("bf16 tensor", "compute", 1e15, dtype="bf16"),
            Ceiling("HBM", "memory", 4e12, level="dram"),
            Ceiling("L2", "memory", 1e13, level="l2"),
        ),
    )
    # synthetic: 1e12 FLOP in 2 ms; DRAM 2 GB (I=500), L2 1 GB (I=1000), L1 0.5 GB (no L1 ceiling)
    rec = k(
        {
            T.format("src_bf16_dst_fp32"): (1e12, ""),
            "gpu__time_duration.sum": (2, "msecond"),
            "dram__bytes.sum": (2, "Gbyte"),
            "lts__t_bytes.sum": (1, "Gbyte"),
            "l1tex__t_bytes.sum": (0.5, "Gbyte"),
        }
    )
    (p,) = c.place_hierarchical([rec], roof)
    assert p.dtype == "bf16" and p.compute_peak_flops_per_s == 1e15
    dram, l2, l1 = p.level("dram"), p.level("l2"), p.level("l1")
    assert dram.intensity == pytest.approx(500) and dram.attainable_flops_per_s == pytest.approx(
        1e15
    )
    assert dram.bound == "compute"  # 500 * 4e12 = 2e15 > 1e15
    assert l2.attainable_flops_per_s == pytest.approx(1e15)
    assert (
        l1.intensity == pytest.approx(2000)
        and l1.attainable_flops_per_s is None
        and l1.bandwidth_bytes_per_s is None
    )
    assert p.flops_per_s == pytest.approx(5e14) and p.fraction_of_attainable == pytest.approx(0.5)
    # a memory-bound kernel: 1e9 FLOP over 2 GB of DRAM (I=0.5) -> 2e12 attainable
    slow = k(
        {
            T.format("src_bf16_dst_fp32"): (1e9, ""),
            "gpu__time_duration.sum": (1, "msecond"),
            "dram__bytes.sum": (2, "Gbyte"),
            "lts__t_bytes.sum": (4, "Gbyte"),
        }
    )
    (q,) = c.place_hierarchical([slow], roof)
    assert q.level("dram").bound == "memory" and q.level(
        "dram"
    ).attainable_flops_per_s == pytest.approx(2e12)
    assert q.level("l2").attainable_flops_per_s == pytest.approx(2.5e12)
    assert q.limiting_level == "dram" and q.fraction_of_attainable == pytest.approx(1e12 / 2e12)
    assert q.to_dict()["limiting_level"] == "dram"
    pts = slow.points()
    assert [pt.level for pt in pts] == ["l2", "dram"] and pts[1].intensity == pytest.approx(0.5)
    assert pts[0].source == "counters"


def test_place_without_roofline_or_flops():
    (p,) = c.place_hierarchical(c.read_ncu_csv(GEMM))
    assert (
        p.flops is None
        and p.level("dram").bytes == 56_639_232
        and p.level("dram").intensity is None
    )
    assert p.limiting_level is None and p.fraction_of_attainable is None


def test_plot_hierarchical(tmp_path):
    from roofprof.plots.hierarchical import plot_hierarchical
    from roofprof.roofline import Ceiling, Roofline

    roof = Roofline(
        "g",
        (
            Ceiling("bf16", "compute", 1e15, dtype="bf16"),
            Ceiling("HBM", "memory", 4e12, level="dram"),
            Ceiling("L2", "memory", 1e13, level="l2"),
        ),
    )
    recs = [
        k(
            {
                T.format("src_bf16_dst_fp32"): (1e12, ""),
                "gpu__time_duration.sum": (2, "msecond"),
                "dram__bytes.sum": (2, "Gbyte"),
                "lts__t_bytes.sum": (1, "Gbyte"),
                "l1tex__t_bytes.sum": (0.5, "Gbyte"),
            },
            ranges=("roofprof.q_proj",),
        ),
        k(
            {
                S.format("ffma"): (1e6, "inst"),
                "gpu__time_duration.sum": (20, "usecond"),
                "dram__bytes.sum": (12, "Mbyte"),
            },
            name="axpy",
        ),
    ]
    out = plot_hierarchical(
        c.place_hierarchical(recs, roof), tmp_path / "sub" / "h.png", roofline=roof
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = plot_hierarchical(c.place_hierarchical(recs), tmp_path / "h.svg")
    assert svg.read_text().lstrip().startswith("<?xml")
    with pytest.raises(ConfigError, match="no kernel has FLOP counters"):
        plot_hierarchical(c.place_hierarchical(c.read_ncu_csv(GEMM)), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_place_hierarchical_without_the_kernels_dtype_on_the_roofline():
    from roofprof.roofline import Ceiling, Roofline

    roof = Roofline(
        "fp32-only",
        (
            Ceiling("fp32", "compute", 1e13, dtype="fp32"),
            Ceiling("HBM", "memory", 4e12, level="dram"),
        ),
    )
    rec = k(
        {
            T.format("src_bf16_dst_fp32"): (1e12, ""),
            "gpu__time_duration.sum": (2, "msecond"),
            "dram__bytes.sum": (2, "Gbyte"),
        }
    )
    (p,) = c.place_hierarchical([rec], roof)
    dram = p.level("dram")
    assert p.compute_peak_flops_per_s is None and dram.bandwidth_bytes_per_s == 4e12
    assert (
        dram.attainable_flops_per_s is None
        and dram.bound is None
        and dram.intensity == pytest.approx(500)
    )
