"""Parsing Nsight Compute output: the real details-page files, the generated raw page, errors.

Fixtures and their provenance: tests/fixtures/ncu_SOURCES.md. The values asserted for the
two real kernels are hand-computed there from the kernels' shapes.
"""

from __future__ import annotations

import importlib.util
import sys
import types
import warnings
from pathlib import Path

import pytest

from roofprof import counters as c
from roofprof.cli import main
from roofprof.counters.metrics import parse_number
from roofprof.counters.parse import _nvtx_stack
from roofprof.errors import DeviceUnavailableError

FIX = Path(__file__).resolve().parent / "fixtures"
GEMM = FIX / "ncu_details_RTX5070_ncu2026.2_Olajide-Badejo_gemm_tiled.csv"
SAXPY = FIX / "ncu_details_RTX5070_ncu2026.2_Olajide-Badejo_saxpy.csv"
RAW = FIX / "ncu_raw_GENERATED_from_details_RTX5070.csv"

# Hand-computed (tests/fixtures/ncu_SOURCES.md)
GEMM_TIME_S = 10_195_552e-9
GEMM_DRAM = 53_261_312 + 3_377_920
GEMM_L1 = (4096 * 64 * 2 * 1024 * 4) + 2048 * 2048 * 4  # tile loads + C stores, bytes
SAXPY_N = 65536 * 256
SAXPY_TIME_S = 292_928e-9
SAXPY_DRAM = 134_221_568 + 43_631_104
SAXPY_L1 = 3 * 4 * SAXPY_N


def test_details_gemm_tiled():
    (k,) = c.read_ncu_csv(GEMM)
    assert k.id == 0 and k.name.startswith("void unnamed>::gemm_tiled_kernel<32>")
    assert k.cc == "12.0" and k.family == "blackwell"
    assert k.grid_size == "(64, 64, 1)" and k.block_size == "(32, 32, 1)"
    assert k.time_s == pytest.approx(GEMM_TIME_S, rel=1e-12)
    assert k.dram_read_bytes == 53_261_312 and k.dram_write_bytes == 3_377_920
    assert k.dram_bytes == GEMM_DRAM
    assert k.l1_bytes == GEMM_L1 == 2_164_260_864
    assert k.byte_source("l1")[0] == "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
    assert k.l2_bytes is None  # no lts__t_bytes in this file
    assert k.flops is None and k.flops_by_pipe == {} and k.intensity("dram") is None
    # the units as read, including the empty ones
    assert k.units["gpu__time_duration.sum"] == "ns"
    assert k.units["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == "sector"
    assert k.units["smsp__thread_inst_executed_per_inst_executed.ratio"] == ""
    assert k.metrics["lts__t_sector_hit_rate.pct"] == (87.5, "%")
    assert len(k.metrics) == 12


def test_details_saxpy():
    (k,) = c.read_ncu_csv(SAXPY)
    assert k.name.startswith("unnamed>::saxpy_kernel")
    assert k.time_s == pytest.approx(SAXPY_TIME_S, rel=1e-12)
    assert k.dram_bytes == SAXPY_DRAM
    assert k.l1_bytes == SAXPY_L1 == 201_326_592
    assert k.metrics["l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"] == (0.0, "")


def test_generated_raw_file_is_what_the_script_writes():
    spec = importlib.util.spec_from_file_location("ncu_make_raw", FIX / "ncu_make_raw.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert RAW.read_text(encoding="utf-8") == mod.generate()
    assert RAW.read_text().startswith("# GENERATED")


def test_raw_page_matches_details_page():
    raw = c.read_ncu_csv(RAW)
    details = c.read_ncu_csv(GEMM) + c.read_ncu_csv(SAXPY)
    assert [k.id for k in raw] == [0, 1]
    assert "raw page" in raw[0].source and "details page" in details[0].source
    for r, d in zip(raw, details, strict=True):
        assert r.name == d.name and r.cc == d.cc
        assert dict(r.metrics) == dict(d.metrics)
        for attr in ("time_s", "dram_bytes", "l1_bytes", "l2_bytes", "flops"):
            assert getattr(r, attr) == getattr(d, attr)


def test_several_kernels_in_one_details_file():
    """Two kernels (IDs 0 and 1) in one details-page file, as ncu prints a multi-kernel run."""
    gemm = GEMM.read_text(encoding="utf-8-sig").splitlines()
    saxpy = SAXPY.read_text(encoding="utf-8-sig").splitlines()
    rows = [line for line in saxpy if line.startswith('"0",')]
    text = "\n".join(gemm + [line.replace('"0",', '"1",', 1) for line in rows])
    ks = c.parse_ncu_csv(text)
    assert [k.id for k in ks] == [0, 1]
    assert ks[1].dram_bytes == SAXPY_DRAM and ks[0].dram_bytes == GEMM_DRAM


def raw_csv(
    header_extra: list[str], units: list[str], rows: list[list[str]], nvtx: bool = False
) -> str:
    """A raw-page CSV in ncu's layout (synthetic values, for parser edge cases)."""
    ident = [
        "ID",
        "Process ID",
        "Process Name",
        "Host Name",
        "Kernel Name",
        "Context",
        "Stream",
        "Block Size",
        "Grid Size",
        "Device",
        "CC",
    ]
    if nvtx:
        ident.insert(4, "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg")
    q = lambda cells: ",".join(f'"{x}"' for x in cells)  # noqa: E731
    lines = [
        "==PROF== Connected to process 7 (/usr/bin/python3)",
        "some program output, with a comma",
        q(ident + header_extra),
        q([""] * len(ident) + units),
    ]
    lines += [q(r) for r in rows]
    lines.append("==PROF== Disconnected from process 7")
    return "\n".join(lines) + "\n"


def nvtx_cell(*ranges: str) -> str:
    # ncu writes the thread id, then one quoted domain:range:... entry per range (quotes doubled)
    return "1  " + "  ".join(
        f'""<default domain>:{r}:none:none:none:none:none:none""' for r in ranges
    )


def test_raw_units_prefixes_and_nvtx_ranges():
    text = raw_csv(
        [
            "dram__bytes_read.sum",
            "dram__bytes_write.sum",
            "gpu__time_duration.sum",
            "lts__t_bytes.sum",
            "l1tex__t_sectors.sum",
        ],
        ["Mbyte", "Kbyte", "usecond", "Gbyte", "sector"],
        [
            [
                "0",
                "7",
                "python3",
                "h",
                nvtx_cell("prefill", "roofprof.decode.attn_qkv"),
                "gemm_a",
                "1",
                "7",
                "(128, 1, 1)",
                "(132, 1, 1)",
                "0",
                "9.0",
                "1.5",
                "250",
                "12.5",
                "1.25",
                "1,000",
            ],
            [
                "1",
                "7",
                "python3",
                "h",
                nvtx_cell("prefill", "roofprof.decode.attn_qkv"),
                "splitk_reduce",
                "1",
                "7",
                "(256, 1, 1)",
                "(8, 1, 1)",
                "0",
                "9.0",
                "0.5",
                "0",
                "2",
                "n/a",
                "10",
            ],
        ],
        nvtx=True,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ks = c.parse_ncu_csv(text)
    assert any("n/a" in str(w.message) and "lts__t_bytes.sum" in str(w.message) for w in caught)
    a, b = ks
    assert a.nvtx_ranges == ("prefill", "roofprof.decode.attn_qkv")
    assert a.range_name == "roofprof.decode.attn_qkv" and a.family == "hopper"
    assert a.dram_bytes == pytest.approx(1.5e6 + 250e3)
    assert a.time_s == pytest.approx(12.5e-6)
    assert a.l2_bytes == pytest.approx(1.25e9)
    assert a.l1_bytes == 1000 * 32
    assert b.l2_bytes is None and "lts__t_bytes.sum" not in b.metrics
    groups = c.group_by_range(ks)
    assert (
        list(groups) == ["roofprof.decode.attn_qkv"]
        and len(groups["roofprof.decode.attn_qkv"]) == 2
    )


def test_nvtx_stack_forms():
    assert _nvtx_stack('1  "<default domain>:a:none"  "<default domain>:roofprof.b:none"') == (
        "a",
        "roofprof.b",
    )
    assert _nvtx_stack("") == ()
    assert _nvtx_stack("7:roofprof.x:none") == ("roofprof.x",)


@pytest.mark.parametrize(
    ("unit", "scale", "base"),
    [
        ("ns", 1e-9, "s"),
        ("nsecond", 1e-9, "s"),
        ("usecond", 1e-6, "s"),
        ("msecond", 1e-3, "s"),
        ("second", 1.0, "s"),
        ("byte", 1.0, "byte"),
        ("Kbyte", 1e3, "byte"),
        ("Mbyte", 1e6, "byte"),
        ("Gbyte", 1e9, "byte"),
        ("KB", 1e3, "byte"),
        ("MiB", 2.0**20, "byte"),
        ("sector", 1.0, "sector"),
        ("", 1.0, ""),
        ("%", 1.0, "%"),
        ("inst", 1.0, "inst"),
        ("byte/second", 1.0, "byte/second"),
    ],
)
def test_unit_scale(unit, scale, base):
    assert c.unit_scale(unit) == (pytest.approx(scale), base)


def test_parse_number():
    assert parse_number("53,261,312") == 53_261_312
    assert parse_number(" 1,234.5 ") == 1234.5
    assert parse_number("4.0e-05") == 4e-5
    assert parse_number("") is None and parse_number("n/a") is None
    with pytest.raises(ValueError):
        parse_number("CachePreferNone")


# ---------------------------------------------------------------- errors


def test_not_ncu_output_names_first_bad_line(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("name,value\na,1\n")
    with pytest.raises(c.NotNcuOutputError, match=r"line 1: 'name,value'"):
        c.read_ncu_csv(p)
    with pytest.raises(c.NotNcuOutputError, match=r"line 2: 'hello'"):
        c.parse_ncu_csv("==PROF== Connected to process 1\nhello\nworld\n")
    with pytest.raises(c.NotNcuOutputError, match="no CSV header"):
        c.parse_ncu_csv("")


def test_truncated_row_is_named():
    lines = SAXPY.read_text(encoding="utf-8-sig").splitlines()
    lines[-1] = lines[-1][:60]
    with pytest.raises(
        c.NotNcuOutputError, match=rf"line {len(lines)}: \d+ fields where the header has 15"
    ):
        c.parse_ncu_csv("\n".join(lines), source="cut.csv")


def test_non_numeric_value_of_a_known_metric_is_an_error():
    text = GEMM.read_text(encoding="utf-8-sig").replace('"byte","53,261,312"', '"byte","lots"')
    with pytest.raises(
        c.NotNcuOutputError, match="line 10: metric dram__bytes_op_read.sum has the non-numeric"
    ):
        c.parse_ncu_csv(text)


def test_non_numeric_value_of_other_metric_is_kept():
    text = GEMM.read_text(encoding="utf-8-sig").replace('"%","87.50"', '"","CachePreferNone"')
    (k,) = c.parse_ncu_csv(text)
    assert k.metrics["lts__t_sector_hit_rate.pct"] == ("CachePreferNone", "")


def test_binary_file(tmp_path):
    p = tmp_path / "x.ncu.csv"
    p.write_bytes(b"\x00\xff\xfe\x01garbage")
    with pytest.raises(c.NotNcuOutputError, match="not UTF-8"):
        c.read_ncu_csv(p)


def test_permission_error_in_log():
    text = (
        "==PROF== Connected to process 1\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
        "NVIDIA GPU Performance Counters on the target device 0.\n"
    )
    with pytest.raises(c.CounterPermissionError, match="run as root"):
        c.parse_ncu_csv(text)


def test_no_kernels_profiled():
    with pytest.raises(c.CollectionError, match="profiled no kernel"):
        c.parse_ncu_csv("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n")


def test_cli_import_bad_file_exit_2(tmp_path, capsys):
    p = tmp_path / "notes.txt"
    p.write_text("just text\n")
    assert main(["counters", "import", str(p)]) == 2
    err = capsys.readouterr().err
    assert "line 1" in err and "not Nsight Compute CSV output" in err and err.count("\n") == 1
    assert main(["counters", "import", str(tmp_path / "missing.csv")]) == 2
    assert "file not found" in capsys.readouterr().err


def test_cli_import_table_and_json(capsys):
    import json

    assert main(["counters", "import", str(RAW)]) == 0
    out = capsys.readouterr().out
    assert "gemm_tiled_kernel" in out and "56.6 MB" in out and "lower bound" in out
    assert main(["counters", "import", str(GEMM), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    k = d["kernels"][0]
    assert k["time_s"] == pytest.approx(GEMM_TIME_S) and k["dram_bytes"] == GEMM_DRAM
    assert k["l1_bytes"] == GEMM_L1 and k["l2_bytes"] is None
    assert k["flops"] == {"fp64": None, "fp32": None, "fp16": None, "tensor": {}, "total": None}
    assert k["intensity_flop_per_byte"] == {"l1": None, "l2": None, "dram": None}
    assert k["units"]["gpu__time_duration.sum"] == "ns"
    assert main(["counters", "import", str(GEMM), "--format", "yaml"]) == 2
    assert "valid choices: table, json" in capsys.readouterr().err


# ---------------------------------------------------------------- .ncu-rep through ncu_report


class _Metric:
    def __init__(self, value, unit, kind="DOUBLE"):
        self._v, self._u, self._k = value, unit, kind

    def as_double(self):
        return float(self._v)

    def as_string(self):
        return str(self._v)

    def unit(self):
        return self._u

    def kind(self):
        return self._k


class _Action:
    def __init__(self, name, metrics):
        self._name, self._m = name, metrics

    def name(self):
        return self._name

    def metric_names(self):
        return list(self._m)

    def metric_by_name(self, n):
        return self._m[n]

    def nvtx_state(self):
        raise RuntimeError("no NVTX")


def test_ncu_rep_through_fake_ncu_report(tmp_path, monkeypatch):
    """The adapter's use of the ncu_report API (load_report/ranges/actions/metrics), faked."""
    action = _Action(
        "gemm",
        {
            "gpu__time_duration.sum": _Metric(2000, "nsecond"),
            "dram__bytes_read.sum": _Metric(3, "Mbyte"),
            "dram__bytes_write.sum": _Metric(1, "Mbyte"),
            "sm__ops_path_tensor_src_bf16_dst_fp32.sum": _Metric(8e9, ""),
            "device__attribute_compute_capability_major": _Metric(9, ""),
            "device__attribute_compute_capability_minor": _Metric(0, ""),
            "launch__func_cache_config": _Metric("CachePreferNone", "", kind="STRING"),
        },
    )
    rng = types.SimpleNamespace(num_actions=lambda: 1, action_by_idx=lambda i: action)
    ctx = types.SimpleNamespace(num_ranges=lambda: 1, range_by_idx=lambda i: rng)
    fake = types.SimpleNamespace(load_report=lambda path: ctx)
    monkeypatch.setitem(sys.modules, "ncu_report", fake)
    rep = tmp_path / "r.ncu-rep"
    rep.write_bytes(b"binary")
    (k,) = c.load_counters(rep)
    assert k.cc == "9.0" and k.family == "hopper"
    assert k.time_s == pytest.approx(2e-6) and k.dram_bytes == pytest.approx(4e6)
    assert k.tensor_flops == {"bf16": 8e9} and k.intensity("dram") == pytest.approx(2000)
    assert k.metrics["launch__func_cache_config"] == ("CachePreferNone", "")


def test_ncu_rep_without_ncu_report(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ncu_report", None)  # import fails
    rep = tmp_path / "r.ncu-rep"
    rep.write_bytes(b"binary")
    with pytest.raises(DeviceUnavailableError, match="pip install ncu-report"):
        c.load_counters(rep)
