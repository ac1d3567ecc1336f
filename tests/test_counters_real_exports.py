"""Real Nsight Compute exports that the line-based reader refused or gave no time for.

Fixtures and provenance: tests/fixtures/ncu/SOURCES.md (ncu 2021.2 details page from an
A100, with a rule cell spanning two lines and cycles-only timing) and
tests/fixtures/ncu_SOURCES.md (the other A100 files). Every expected figure is read from
the file a second time with the csv module here, independently of roofprof's parser.
"""

from __future__ import annotations

import csv
import io
import tracemalloc
from pathlib import Path

import pytest

from roofprof import counters as c

FIX = Path(__file__).resolve().parent / "fixtures"
MULTILINE = FIX / "ncu" / "ncu2021.2_details_A100_leleucas_gpt2_gemm_multiline.csv"
UPSAMPLE = FIX / "ncu_details_A100_leleucas_upsample_rules.csv"
DROPOUT = FIX / "ncu_details_A100_leleucas_dropout.csv"


def _independent(path: Path) -> dict[int, dict[str, tuple[float | str, str]]]:
    """{kernel id: {metric: (value, unit)}} read with csv.DictReader over the whole file."""
    text = path.read_text(encoding="utf-8-sig")
    out: dict[int, dict[str, tuple[float | str, str]]] = {}
    for row in csv.DictReader(io.StringIO(text[text.index('"ID","Process ID"') :])):
        name = row["Metric Name"]
        if not name:
            continue
        raw = row["Metric Value"].replace(",", "")
        try:
            value: float | str = float(raw)
        except ValueError:
            value = row["Metric Value"]
        out.setdefault(int(row["ID"]), {}).setdefault(name, (value, row["Metric Unit"]))
    return out


def _num(metrics: dict[str, tuple[float | str, str]], name: str) -> float:
    value = metrics[name][0]
    assert isinstance(value, float)
    return value


def test_a_rule_cell_spanning_two_lines_is_one_record():
    """ncu 2021.2 wrote a rule's Python error with a line break inside the quoted cell."""
    text = MULTILINE.read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(text)))
    (broken,) = [r for r in rows if any("\n" in cell for cell in r)]
    assert broken[-1].startswith("float division by zero\n/root/Documents/NVIDIA Nsight")
    assert len(text.splitlines()) == len(rows) + 1  # one record takes two lines

    (k,) = c.read_ncu_csv(MULTILINE)
    gemm = "ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_relu_f2f_stages_64x6_tn"
    assert (k.id, k.name) == (5, gemm)
    (k2,) = c.parse_ncu_csv(text, source="text")
    assert k2.metrics == k.metrics
    expected = _independent(MULTILINE)[5]
    assert dict(k.metrics) == expected
    # totals against the independent reading
    assert k.dram_bytes == _num(expected, "dram__bytes.sum") == 3_642_496
    assert k.l2_bytes == _num(expected, "lts__t_bytes.sum") == 11_477_248
    assert k.l1_bytes == _num(expected, "l1tex__t_bytes.sum") == 7_409_664
    sass = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"
    weights = (("fadd", 1), ("fmul", 1), ("ffma", 2))
    fp32 = sum(_num(expected, sass.format(op)) * f for op, f in weights)
    assert k.cuda_core_flops["fp32"] == fp32 == 589_824


def test_records_after_the_two_line_cell_keep_their_line_numbers(tmp_path):
    text = MULTILINE.read_text(encoding="utf-8")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith('"5",') and line.count('"') % 2)
    bad = lines[: at + 3] + [lines[at + 3].replace('"5",', '"x",', 1)] + lines[at + 4 :]
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(bad) + "\n", encoding="utf-8")
    with pytest.raises(c.NotNcuOutputError, match=rf"line {at + 4}: kernel ID 'x'"):
        c.read_ncu_csv(path)


def test_chatter_between_records_is_skipped_but_kept_inside_a_cell():
    header = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value","Rule Description"'
    text = "\n".join(
        [
            header,
            '"0","k","gpu__time_duration.sum","nsecond","1,000",""',
            "==PROF== Disconnected from process 1",
            '"0","k","","","","first line',
            "==PROF== this line is cell text",
            'third line"',
            "",
            '"0","k","dram__bytes.sum","byte","64",""',
        ]
    )
    (k,) = c.parse_ncu_csv(text)
    assert k.time_s == pytest.approx(1e-6) and k.dram_bytes == 64


def test_an_unclosed_quoted_cell_names_its_line(tmp_path):
    text = MULTILINE.read_text(encoding="utf-8")
    cut = text[: text.index("float division by zero") + 30]  # into the second line
    path = tmp_path / "cut.csv"
    path.write_text(cut, encoding="utf-8")
    line = cut.count("\n")  # the rule row starts one line above the cut
    with pytest.raises(c.NotNcuOutputError, match=rf"line {line}: a quoted cell opened here"):
        c.read_ncu_csv(path)


def test_memory_stays_flat_with_a_two_line_cell_in_every_repeat(tmp_path):
    lines = MULTILINE.read_text(encoding="utf-8").splitlines()
    header, body = lines[0], lines[1:]
    path = tmp_path / "many.csv"
    with path.open("w", encoding="utf-8") as f:
        f.write(header + "\n")
        for _ in range(300):  # the same kernel again and again: folds into one record
            f.write("\n".join(body) + "\n")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        records = c.read_ncu_csv(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(records) == 1 and records[0].metrics == c.read_ncu_csv(MULTILINE)[0].metrics
    assert peak < size / 8, (peak, size)


# ---------------------------------------------------------------- cycles-only timing


def test_cycles_only_time_is_cycles_over_the_clock():
    """The NERSC roofline recipe collects sm__cycles_elapsed.avg and .avg.per_second only."""
    (k,) = c.read_ncu_csv(MULTILINE)
    m = _independent(MULTILINE)[5]
    assert "gpu__time_duration.sum" not in m
    assert m["sm__cycles_elapsed.avg.per_second"][1] == "cycle/second"
    expected = _num(m, "sm__cycles_elapsed.avg") / _num(m, "sm__cycles_elapsed.avg.per_second")
    assert k.time_s == pytest.approx(expected, rel=1e-12)
    assert k.time_s == pytest.approx(12_580.52 / 990_280_110.08, rel=1e-12)
    assert k.time_source == ("sm__cycles_elapsed.avg", "sm__cycles_elapsed.avg.per_second")
    assert k.to_dict()["time_source"] == list(k.time_source)
    assert k.flops_per_s == pytest.approx(k.flops / expected)

    (u,) = c.read_ncu_csv(UPSAMPLE)
    assert u.time_s == pytest.approx(18_050.06 / 1_139_523_709.32, rel=1e-12)


def test_cycle_time_agrees_with_the_duration_where_both_were_collected():
    """On the A100 dropout file ncu printed both: they agree to 1e-4."""
    k0, k1 = c.read_ncu_csv(DROPOUT)
    assert k0.time_source == ("gpu__time_duration.sum",)  # the measured duration wins
    for k in (k0, k1):
        cycles = k.value("sm__cycles_elapsed.avg")
        clock = k.value("sm__cycles_elapsed.avg.per_second")
        assert cycles and clock
        assert cycles / clock == pytest.approx(k.time_s, rel=1e-4)


@pytest.mark.parametrize(
    "unit, hz",
    [
        # unit strings as real ncu output prints them (see tests/fixtures/ncu/SOURCES.md)
        ("cycle/second", 1.0),
        ("cycle/usecond", 1e6),
        ("cycle/nsecond", 1e9),
        ("Ghz", 1e9),
        ("Mhz", 1e6),
        ("hz", 1.0),
    ],
)
def test_clock_units_as_ncu_prints_them(unit, hz):
    assert c.unit_scale(unit) == (pytest.approx(hz), "hz")
    rate = {"cycle/second": 1.41e9, "cycle/usecond": 1410.0, "cycle/nsecond": 1.41,
            "Ghz": 1.41, "Mhz": 1410.0, "hz": 1.41e9}[unit]  # fmt: skip
    text = "\n".join(
        [
            '"ID","Kernel Name","sm__cycles_elapsed.avg","sm__cycles_elapsed.avg.per_second"',
            f'"","","cycle","{unit}"',
            f'"0","k","14,100","{rate}"',
        ]
    )
    (k,) = c.parse_ncu_csv(text)
    assert k.time_s == pytest.approx(1e-5, rel=1e-12)


def test_a_clock_in_a_wrong_unit_is_refused():
    text = "\n".join(
        [
            '"ID","Kernel Name","sm__cycles_elapsed.avg","sm__cycles_elapsed.avg.per_second"',
            '"","","cycle","byte"',
            '"0","k","100","1"',
        ]
    )
    with pytest.raises(c.NotNcuOutputError, match="clock rate in 'byte'"):
        c.parse_ncu_csv(text)


def test_a_zero_clock_gives_no_time():
    text = "\n".join(
        [
            '"ID","Kernel Name","sm__cycles_elapsed.avg","sm__cycles_elapsed.avg.per_second"',
            '"","","cycle","cycle/second"',
            '"0","k","100","0"',
        ]
    )
    (k,) = c.parse_ncu_csv(text)
    assert k.time_s is None and k.time_source is None
