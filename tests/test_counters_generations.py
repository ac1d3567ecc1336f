"""Real Nsight Compute CSV from another GPU generation (A100, sm_80), not the RTX 5070 files.

Fixtures and provenance: tests/fixtures/ncu_SOURCES.md. Both files come from
leleucas/Actual-Parameter-Collection-for-Machine-Learning-Operators and were written by an
older ncu (CUDA 11.x era, 2022-2023): details page, no CC/Device columns, so the family is
unknown to the parser; A100 is inferred from the repository (see ncu_SOURCES.md). Both
carry the NERSC FLOP counters (sm__sass_thread_inst_executed_op_*), dram__bytes.sum,
lts__t_bytes.sum and l1tex__t_bytes.sum. Expected values are computed by hand from the cells.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from roofprof import counters as c

FIX = Path(__file__).resolve().parent / "fixtures"
DROPOUT = FIX / "ncu_details_A100_leleucas_dropout.csv"
UPSAMPLE = FIX / "ncu_details_A100_leleucas_upsample_rules.csv"


def test_a100_dropout_two_kernels():
    k0, k1 = c.read_ncu_csv(DROPOUT)
    assert (k0.id, k1.id) == (0, 1)
    assert k0.name.startswith(
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<double, double,"
    )
    assert k0.name.endswith("unsigned int, double, at::PhiloxCudaState)")
    # No "CC" column in this ncu version's details page: family unknown.
    assert k0.cc is None and k0.family is None
    assert k0.process == "python3.6"

    # kernel 0 -- gpu__time_duration.sum "nsecond" "11,744"
    assert k0.time_s == pytest.approx(11_744e-9, rel=1e-12)
    # dram__bytes.sum "byte" "4,194,688" (total only: read/write unknown)
    assert k0.dram_bytes == 4_194_688
    assert k0.byte_source("dram") == ("dram__bytes.sum",)
    assert k0.dram_read_bytes is None and k0.dram_write_bytes is None
    assert k0.l2_bytes == 20_594_592  # lts__t_bytes.sum "20,594,592"
    assert k0.l1_bytes == 17_301_504  # l1tex__t_bytes.sum "17,301,504"
    # fp64: dadd 0 + dmul 1,048,576 + 2 x dfma 655,360 = 2,359,296
    # fp32: fadd 0 + fmul 0 + 2 x ffma 524,288 = 1,048,576; fp16: all 0
    assert k0.cuda_core_flops == {"fp64": 2_359_296, "fp32": 1_048_576, "fp16": 0}
    assert k0.flops == 2_359_296 + 1_048_576 == 3_407_872
    assert k0.dominant_pipe == "cuda:fp64"
    assert k0.intensity("dram") == pytest.approx(3_407_872 / 4_194_688)
    # sm__inst_executed_pipe_tensor.sum "inst" "0": kept as a diagnostic, no tensor FLOPs
    assert k0.tensor_instructions == 0 and k0.tensor_flops == {}
    assert len(k0.metrics) == 21
    assert k0.metrics["sm__cycles_elapsed.avg.per_second"] == (1_046_387_753.56, "cycle/second")

    # kernel 1 -- time "7,360" ns; dram "1,048,832"
    assert k1.time_s == pytest.approx(7_360e-9, rel=1e-12)
    assert k1.dram_bytes == 1_048_832
    # fp64: 0 + 262,144 + 2 x 163,840 = 589,824; fp32: 2 x 131,072 = 262,144
    assert k1.cuda_core_flops["fp64"] == 589_824 and k1.cuda_core_flops["fp32"] == 262_144
    assert k1.flops == 851_968


def _pad_rule_columns(text: str) -> str:
    """Pad metric rows that stop before the Rule Name/Type/Description columns (test-only)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    width = len(next(csv.reader([lines[at]])))
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for line in lines[at:]:
        row = next(csv.reader([line]))
        writer.writerow(row + [""] * (width - len(row)))
    return "\n".join(lines[:at]) + "\n" + out.getvalue()


def _check_upsample(k: c.KernelCounters) -> None:
    assert k.id == 0 and k.name.startswith(
        "void at::native::(anonymous namespace)::upsample_bilinear2d_out_frame"
    )
    assert k.cc is None and k.family is None
    # no gpu__time_duration.sum (cycles only): time = sm__cycles_elapsed.avg / .avg.per_second
    assert k.time_s == pytest.approx(18_050.06 / 1_139_523_709.32, rel=1e-12)
    assert k.dram_bytes == 256  # dram__bytes.sum "byte" "256"
    assert k.l2_bytes == 168_608  # lts__t_bytes.sum "168,608"
    assert k.l1_bytes == 10_240  # l1tex__t_bytes.sum "10,240"
    # fp32: fadd 24 + fmul 768 + 2 x ffma 776 = 2,344; fp16: 0 + 0 + 2 x hfma 4 = 8; fp64: 0
    assert k.cuda_core_flops == {"fp64": 0, "fp32": 2_344, "fp16": 8}
    assert k.flops == 2_352
    assert k.tensor_instructions == 1 and k.tensor_flops == {}
    # Launch Statistics rows are metrics too; the rule row (empty Metric Name) is skipped
    assert k.metrics["Function Cache Configuration"] == ("cudaFuncCachePreferNone", "")
    assert k.metrics["Block Size"] == (1024.0, "")
    assert k.metrics["Achieved Occupancy"] == (3.16, "%")


def test_a100_upsample_values_with_rule_columns_padded():
    (k,) = c.parse_ncu_csv(_pad_rule_columns(UPSAMPLE.read_text(encoding="utf-8")), source="padded")
    _check_upsample(k)


def test_a100_upsample_parses_as_is():
    # ncu of this era adds "Rule Name","Rule Type","Rule Description" to the header but ends
    # metric rows after "Metric Value" (13 fields for 15 columns); only rule rows have all 15.
    (k,) = c.read_ncu_csv(UPSAMPLE)
    _check_upsample(k)


def test_rows_shorter_than_a_non_rule_header_are_still_rejected():
    text = UPSAMPLE.read_text(encoding="utf-8").replace('"Rule Description"', '"Other Column"', 1)
    with pytest.raises(c.NotNcuOutputError, match="fields where the header has 15"):
        c.parse_ncu_csv(text, source="bad")
