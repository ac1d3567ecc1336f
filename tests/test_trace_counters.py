"""``roofprof trace --counters``: signature ids equal across processes, the NVTX child, the
join of ncu records (a real Nsight Compute details page, an NVTX column added) to op rows,
and the one-line refusals without a GPU or ncu."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import roofprof  # noqa: E402
from roofprof.counters import parse_ncu_csv  # noqa: E402
from roofprof.tracing.counters import (  # noqa: E402
    SIG_RANGE_PREFIX,
    child_command,
    counters_by_signature,
    merge_counters,
    trace_counters,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NVTX_COLUMN = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
GEMM_DRAM = 53_261_312 + 3_377_920  # dram__bytes_op_read + op_write in the gemm_tiled fixture
SAXPY_DRAM = 134_221_568 + 43_631_104


def with_range(fixture: str, range_name: str, kernel_id: int) -> list[str]:
    """The fixture's header and metric rows with ncu's NVTX column (after Host Name) naming
    ``range_name``, the kernel renumbered ``kernel_id``."""
    lines = (FIXTURES / fixture).read_text(encoding="utf-8-sig").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    header = lines[start].replace('"Host Name",', f'"Host Name","{NVTX_COLUMN}",', 1)
    cell = f'"1  ""<default domain>:{range_name}:none:none:none:none:none:none"""'
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith('"0",'):
            continue
        cells = line.split('","')
        cells[0] = f'"{kernel_id}'
        rows.append('","'.join(cells[:4]) + '",' + cell + ',"' + '","'.join(cells[4:]))
    return [header, *rows]


def ncu_csv(range_name: str) -> str:
    """Two kernels (gemm_tiled, saxpy) inside one signature range, one outside any."""
    gemm = with_range("ncu_details_RTX5070_ncu2026.2_Olajide-Badejo_gemm_tiled.csv", range_name, 0)
    saxpy = with_range("ncu_details_RTX5070_ncu2026.2_Olajide-Badejo_saxpy.csv", range_name, 1)
    other = with_range("ncu_details_RTX5070_ncu2026.2_Olajide-Badejo_saxpy.csv", "user.range", 2)
    return (
        "\n".join(["==PROF== Connected to process 1 (python)", *gemm, *saxpy[1:], *other[1:]])
        + "\n"
    )


def traced_mm():
    a, b = torch.randn(32, 48), torch.randn(48, 16)
    with torch.no_grad(), roofprof.trace(device="cpu", roofline="none", replay=False) as t:
        torch.mm(a, b)
    return t.result


def test_merge_counters_from_a_real_details_page():
    r = traced_mm()
    mm = next(o for o in r.ops if o.op == "aten::mm")
    assert len(mm.signature) == 12 and mm.measured_dram_bytes is None
    records = parse_ncu_csv(ncu_csv(SIG_RANGE_PREFIX + mm.signature))
    assert len(records) == 3
    by_sig = counters_by_signature(records)
    assert set(by_sig) == {mm.signature} and by_sig[mm.signature]["kernels"] == 2
    merged = merge_counters(r, records)
    row = next(o for o in merged.ops if o.op == "aten::mm")
    assert row.measured_dram_bytes == GEMM_DRAM + SAXPY_DRAM and row.measured_kernels == 2
    assert row.measured_time_s == pytest.approx((10_195_552 + 292_928) * 1e-9)
    assert row.measured_flops is None  # the page has no FLOP counter: not invented
    assert row.flops == mm.flops and row.bytes == mm.bytes  # the formula's, beside the counters
    assert "measured_dram_bytes" in merged.to_dataframe().columns
    assert all(o.measured_kernels is None for o in merged.ops if o is not row)
    assert "Nsight Compute (one call)" in merged.table()


def test_report_shows_counter_columns(tmp_path):
    r = traced_mm()
    mm = next(o for o in r.ops if o.op == "aten::mm")
    merged = merge_counters(r, parse_ncu_csv(ncu_csv(SIG_RANGE_PREFIX + mm.signature)))
    merged.save(tmp_path)
    assert "ncu DRAM MB" in (tmp_path / "report.html").read_text()
    assert "measured_dram_bytes" in (tmp_path / "ops.csv").read_text().splitlines()[0]


CHILD = """
import torch, roofprof
a, b = torch.randn(32, 48), torch.randn(48, 16)
with torch.no_grad(), roofprof.trace(
    device="cpu", roofline="none", replay=False, nvtx_signatures=True
) as t:
    torch.mm(a, b)
    torch.mm(a, b)
print(sorted(t._nvtx_done))
"""


def test_nvtx_child_ranges_carry_the_parents_signature_ids():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    child_ids = json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"'))
    parent_ids = sorted(o.signature for o in traced_mm().ops)
    assert child_ids == parent_ids  # one range per signature (two calls of mm: one range)


def test_child_command_is_an_argument_list():
    cmd = child_command("m.py", ["--x", "1"], device="cuda:0", region="step", warmup=2, steps=3)
    assert cmd[:4] == [sys.executable, "-m", "roofprof", "trace"] and "--nvtx-signatures" in cmd
    assert cmd[cmd.index("--region") + 1] == "step" and cmd[-3:] == ["--", "--x", "1"]


def test_trace_counters_with_a_fake_ncu(tmp_path, monkeypatch):
    from test_counters_collect import AVAILABLE, FAKE_NCU

    r = traced_mm()
    mm = next(o for o in r.ops if o.op == "aten::mm")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ncu = bin_dir / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable))
    ncu.chmod(0o755)
    (tmp_path / "c.csv").write_text(ncu_csv(SIG_RANGE_PREFIX + mm.signature))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.delenv("ROOFPROF_NCU", raising=False)
    monkeypatch.setenv("FAKE_NCU_METRICS", ",".join(AVAILABLE))
    monkeypatch.setenv("FAKE_NCU_CSV", str(tmp_path / "c.csv"))
    monkeypatch.setenv("FAKE_NCU_ARGV", str(tmp_path / "argv.json"))
    with pytest.warns(Warning):  # the fake ncu lacks some metrics: dropped with a warning
        merged = trace_counters(
            r,
            "model.py",
            ["--n", "1"],
            tmp_path / "out" / "counters.csv",
            device="cuda:0",
            compute_capability="12.0",
        )
    row = next(o for o in merged.ops if o.op == "aten::mm")
    assert row.measured_dram_bytes == GEMM_DRAM + SAXPY_DRAM
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert "--nvtx" in argv and argv[-6:] == [
        "--nvtx-signatures",
        "--warmup",
        "0",
        "--",
        "--n",
        "1",
    ]


def test_cli_counters_refuses_without_gpu_or_ncu(capsys, tmp_path, monkeypatch):
    from roofprof.cli import main

    script = tmp_path / "s.py"
    script.write_text("print('RAN')\n")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("ROOFPROF_NCU", raising=False)
    monkeypatch.setattr("roofprof.counters.collection._install_candidates", lambda: [])
    code = main(["trace", str(script), "--device", "cpu", "--counters"])
    out, err = capsys.readouterr()
    assert code == 2 and "RAN" not in out and len(err.strip().splitlines()) == 1
    assert "a GPU" in err and "ncu" in err

    from test_trace_gpu import AsyncCpu

    gpu = AsyncCpu()
    monkeypatch.setattr("roofprof.devices.select", lambda *a, **k: gpu)
    code = main(["trace", str(script), "--device", "cpu", "--counters"])
    out, err = capsys.readouterr()
    assert code == 2 and "RAN" not in out and "ncu" in err and "a GPU" not in err
    code = main(["trace", "--import", str(script), "--counters"])
    assert code == 2 and "--import" in capsys.readouterr().err
