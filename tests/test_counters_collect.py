"""Collection under ncu without a GPU: the command line built, and a fake ``ncu`` executable.

The fake ncu answers ``--version`` and ``--query-metrics``, records the argument list it
was given, and writes a synthetic raw-page CSV to ``--log-file`` (or prints
ERR_NVGPUCTRPERM / "No kernels were profiled"). Real collection: test_counters_gpu.py.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

from roofprof import counters as c
from roofprof.cli import main
from roofprof.counters import collection
from roofprof.errors import ConfigError, RoofprofError
from roofprof.selftest.counters import selftest_check

S = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"

FAKE_NCU = r"""#!{python}
import json, os, sys
args = sys.argv[1:]
mode = os.environ.get("FAKE_NCU_MODE", "ok")
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\n"
          "Version 2099.1.0.0 (build 1) (public-release)")
    sys.exit(0)
if args and args[0] == "--query-metrics":
    if mode == "perm":
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
              "NVIDIA GPU Performance Counters")
        sys.exit(1)
    print("Device GH100\n---------------------------------------")
    print("Metric Name                      Metric Type   Metric Unit   Metric Description")
    for name in os.environ["FAKE_NCU_METRICS"].split(","):
        print(f"{{name}}    Counter    byte    # of something")
    sys.exit(0)
with open(os.environ["FAKE_NCU_ARGV"], "w") as fh:
    json.dump(args, fh)
log = args[args.index("--log-file") + 1]
if mode == "perm":
    print("==PROF== Connected to process 1")
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
          "NVIDIA GPU Performance Counters on the target device 0.")
    sys.exit(1)
with open(log, "w") as fh:
    fh.write("==PROF== Connected to process 1 (python)\n")
    if mode == "nokernels":
        fh.write("==WARNING== No kernels were profiled.\n")
    else:
        fh.write(open(os.environ["FAKE_NCU_CSV"]).read())
    fh.write("==PROF== Disconnected from process 1\n")
sys.exit(int(os.environ.get("FAKE_NCU_RC", "0")))
"""

# Synthetic raw page of a Hopper run: one bf16 GEMM (2*1024^3 FLOPs) in range roofprof.q_proj.
SYNTHETIC_CSV = (
    '"ID","Process ID","Process Name","Host Name",'
    '"thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",'
    '"Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC",'
    '"dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum","l1tex__t_bytes.sum",'
    '"lts__t_bytes.sum","sm__ops_path_tensor_src_bf16_dst_fp32.sum"\n'
    '"","","","","","","","","","","","","byte","byte","nsecond","byte","byte",""\n'
    '"0","1","python","h","1  ""<default domain>:roofprof.q_proj:none:none:none:none:none:none""",'
    '"sm90_xmma_gemm_bf16","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0",'
    '"4,194,304","2,097,152","20,000","1,000,000,000","100,000,000","2,147,483,648"\n'
)
AVAILABLE = [
    "gpu__time_duration",
    "dram__bytes_read",
    "dram__bytes_write",
    "lts__t_bytes",
    "l1tex__t_bytes",
    "sm__sass_thread_inst_executed_op_ffma_pred_on",
    "sm__ops_path_tensor_src_bf16_dst_fp32",
    "sm__inst_executed_pipe_tensor",
]


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ncu = bin_dir / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable))
    ncu.chmod(0o755)
    csv_file = tmp_path / "synthetic.csv"
    csv_file.write_text(SYNTHETIC_CSV)
    argv = tmp_path / "argv.json"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.delenv("ROOFPROF_NCU", raising=False)
    monkeypatch.setenv("FAKE_NCU_METRICS", ",".join(AVAILABLE))
    monkeypatch.setenv("FAKE_NCU_CSV", str(csv_file))
    monkeypatch.setenv("FAKE_NCU_ARGV", str(argv))
    return ncu, argv


def test_build_ncu_command_exact():
    cmd = c.build_ncu_command(
        ["python", "bench.py", "--size", "a b; rm -rf /"],
        Path("out/ncu.csv"),
        ["gpu__time_duration.sum", "dram__bytes_read.sum"],
        ncu="/opt/ncu",
    )
    assert cmd == [
        "/opt/ncu",
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--clock-control",
        "none",
        "--cache-control",
        "all",
        "--replay-mode",
        "kernel",
        "--target-processes",
        "all",
        "--metrics",
        "gpu__time_duration.sum,dram__bytes_read.sum",
        "--log-file",
        "out/ncu.csv",
        "--nvtx",
        "--nvtx-include",
        r"regex:roofprof\..*/",
        "python",
        "bench.py",
        "--size",
        "a b; rm -rf /",
    ]
    base = c.build_ncu_command(
        ["x"], "o.csv", ["m.sum"], clock_control="base", nvtx_include=None, launch_count=5
    )
    assert base[base.index("--clock-control") + 1] == "base" and "--nvtx" not in base
    assert base[-3:] == ["--launch-count", "5", "x"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"command": []}, "no command"),
        ({"metrics": []}, "no metrics"),
        ({"clock_control": "locked"}, "valid choices: none, base"),
        ({"cache_control": "some"}, "valid choices: all, none"),
        ({"launch_count": 0}, "at least 1"),
    ],
)
def test_build_ncu_command_rejects(kwargs, message):
    args = {"command": ["x"], "out_csv": "o.csv", "metrics": ["m.sum"], **kwargs}
    with pytest.raises(ConfigError, match=message):
        c.build_ncu_command(args.pop("command"), args.pop("out_csv"), args.pop("metrics"), **args)


def test_run_under_ncu_with_fake_ncu(fake_ncu, tmp_path):
    _, argv_file = fake_ncu
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = c.run_under_ncu(
            ["python", "-c", "print('a b')"], tmp_path / "o" / "ncu.csv", compute_capability="9.0"
        )
    (rec,) = records
    assert rec.range_name == "roofprof.q_proj" and rec.family == "hopper"
    assert rec.tensor_flops == {"bf16": 2 * 1024**3} and rec.dram_bytes == 6 * 2**20
    assert rec.intensity("l2") == pytest.approx(2 * 1024**3 / 1e8)
    argv = json.loads(argv_file.read_text())
    assert argv[-3:] == ["python", "-c", "print('a b')"]  # an argument list, no shell
    assert (
        argv[argv.index("--clock-control") + 1] == "none"
        and argv[argv.index("--cache-control") + 1] == "all"
    )
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert {collection.base_metric_name(m) for m in metrics} <= set(AVAILABLE)
    assert (
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum" in metrics and S.format("dfma") not in metrics
    )
    dropped = [str(w.message) for w in caught if issubclass(w.category, c.CounterWarning)]
    assert any("dropped" in m and S.format("dfma") in m for m in dropped)


def test_collect_reports_plan_and_version(fake_ncu, tmp_path):
    coll = c.collect(["true"], tmp_path / "ncu.csv", compute_capability="9.0", metrics_set="memory")
    assert coll.ncu_version == "2099.1.0.0" and coll.verified and coll.returncode == 0
    assert coll.plan.metrics == (
        "gpu__time_duration.sum",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "lts__t_bytes.sum",
        "l1tex__t_bytes.sum",
    )


@pytest.mark.filterwarnings("ignore:.*dropped:roofprof.counters.CounterWarning")
def test_command_failure_is_a_warning_when_kernels_were_profiled(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_RC", "3")
    with pytest.warns(c.CounterWarning, match="exited 3; 1 kernel"):
        records = c.run_under_ncu(["false"], tmp_path / "ncu.csv", compute_capability="9.0")
    (rec,) = records  # the kernel profiled before the failure is kept, with its numbers
    assert rec.name == "sm90_xmma_gemm_bf16" and rec.time_s == pytest.approx(20e-6)
    assert rec.dram_bytes == 6 * 2**20 and rec.tensor_flops == {"bf16": 2 * 1024**3}


def test_permission_error(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    with pytest.raises(c.CounterPermissionError, match="NVreg_RestrictProfilingToAdminUsers=0"):
        c.run_under_ncu(["true"], tmp_path / "ncu.csv", compute_capability="9.0")
    with pytest.raises(c.CounterPermissionError):
        c.run_under_ncu(
            ["true"], tmp_path / "ncu.csv", compute_capability="9.0", verify_metrics=False
        )


@pytest.mark.filterwarnings("ignore::roofprof.counters.CounterWarning")
def test_no_kernels_profiled_explains_the_nvtx_filter(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "nokernels")
    with pytest.raises(c.CollectionError, match=r"NVTX range matching regex:roofprof"):
        c.run_under_ncu(["true"], tmp_path / "ncu.csv", compute_capability="9.0")


def test_ncu_not_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ROOFPROF_NCU", raising=False)
    monkeypatch.setattr(collection, "_install_candidates", lambda: [])
    with pytest.raises(c.NcuNotFoundError, match="install Nsight Compute"):
        c.find_ncu()
    with pytest.raises(c.NcuNotFoundError, match="ROOFPROF_NCU"):
        c.run_under_ncu(["true"], tmp_path / "ncu.csv")
    assert issubclass(c.NcuNotFoundError, RoofprofError)


def test_cli_collect_with_fake_ncu(fake_ncu, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(collection, "detect_compute_capability", lambda: "9.0")
    out = tmp_path / "run"
    code = main(
        ["counters", "collect", "--out", str(out), "--format", "json", "--", "python", "-c", "pass"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    payload = json.loads(captured.out)
    saved = json.loads((out / "counters.json").read_text())
    assert (
        saved["kernels"] == payload["kernels"] and saved["kernels"][0]["range"] == "roofprof.q_proj"
    )
    assert (
        saved["metric_names_verified"] is True
        and saved["provenance"]["ncu_version"] == "2099.1.0.0"
    )
    assert saved["provenance"]["clock_control"] == "none"
    assert any("dropped" in w for w in saved["warnings"]) and "roofprof: warning:" in captured.err
    assert (out / "ncu.csv").exists()
    assert main(["counters", "collect", "--out", str(out), "--all-kernels", "--", "true"]) == 0
    assert "sm90_xmma_gemm_bf16" in capsys.readouterr().out


def test_cli_collect_errors(fake_ncu, tmp_path, capsys, monkeypatch):
    assert main(["counters", "collect", "--out", str(tmp_path)]) == 2
    assert "no command to profile" in capsys.readouterr().err
    assert (
        main(
            [
                "counters",
                "collect",
                "--clock-control",
                "locked",
                "--out",
                str(tmp_path),
                "--",
                "true",
            ]
        )
        == 2
    )
    assert "valid choices: none, base" in capsys.readouterr().err
    assert (
        main(
            [
                "counters",
                "collect",
                "--all-kernels",
                "--nvtx-include",
                "x/",
                "--out",
                str(tmp_path),
                "--",
                "true",
            ]
        )
        == 2
    )
    assert "exclude each other" in capsys.readouterr().err
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    assert main(["counters", "collect", "--out", str(tmp_path), "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "ERR_NVGPUCTRPERM" in err and "run as root" in err and err.count("\n") == 1


def test_cli_import_with_roofline_and_plot(tmp_path, capsys):
    from roofprof.results import write_json_atomic
    from roofprof.roofline import Ceiling, Roofline

    csv_file = tmp_path / "ncu.csv"
    csv_file.write_text("==PROF== Connected to process 1\n" + SYNTHETIC_CSV)
    roof = Roofline(
        "test",
        (
            Ceiling("bf16", "compute", 9.89e14, dtype="bf16"),
            Ceiling("HBM3", "memory", 3.35e12, level="dram"),
        ),
    )
    write_json_atomic(tmp_path / "roofline.json", roof.to_dict())
    png = tmp_path / "h.png"
    code = main(
        [
            "counters",
            "import",
            str(csv_file),
            "--roofline",
            str(tmp_path / "roofline.json"),
            "--plot",
            str(png),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "% of roof" in captured.out and "dram" in captured.out and png.exists()
    code = main(
        [
            "counters",
            "import",
            str(csv_file),
            "--roofline",
            str(tmp_path / "roofline.json"),
            "--format",
            "json",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    h = d["hierarchical"][0]
    # I_dram = 2^31 / (6 * 2^20) = 341.3 FLOP/B, right of the ridge 9.89e14 / 3.35e12 = 295 FLOP/B
    assert h["levels"][2]["level"] == "dram" and h["levels"][2]["bound"] == "compute"
    assert h["flops_per_s"] == pytest.approx(2**31 / 20e-6)


@pytest.mark.filterwarnings("ignore::roofprof.counters.CounterWarning")
def test_selftest_check_assembly_with_fake_ncu(fake_ncu, tmp_path, monkeypatch):
    """selftest_check's bookkeeping on a synthetic Hopper result (the GPU test runs it for real)."""
    gemm_flops, n = 2 * 4096**3, 2**24
    rows = [
        (
            "0",
            "roofprof.selftest.gemm_bf16",
            "nvjet_bf16_gemm",
            "100,663,296",
            "33,554,432",
            "250,000",
            f"{gemm_flops}",
            "0",
        ),
        (
            "1",
            "roofprof.selftest.axpy_fp32",
            "vectorized_elementwise",
            "134,217,728",
            "67,108,864",
            "70,000",
            "0",
            f"{n}",
        ),
    ]
    header = (
        '"ID","thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",'
        '"Kernel Name","CC",'
        '"dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum",'
        '"sm__ops_path_tensor_src_bf16_dst_fp32.sum",'
        '"sm__sass_thread_inst_executed_op_ffma_pred_on.sum"\n'
        '"","","","","byte","byte","nsecond","",""\n'
    )
    body = "".join(
        f'"{i}","1  ""<default domain>:{r}:none""","{k}","9.0","{a}","{b}","{t}","{f}","{g}"\n'
        for i, r, k, a, b, t, f, g in rows
    )
    Path(tmp_path / "synthetic.csv").write_text(header + body)
    monkeypatch.setattr(collection, "detect_compute_capability", lambda: "9.0")
    result = selftest_check(tmp_path / "st")
    assert result["passed"], result["checks"]
    assert result["family"] == "hopper" and result["metric_names_verified"]
    assert result["table_names_seen"]["sm__ops_path_tensor_src_bf16_dst_fp32.sum"] is True
    assert result["table_names_seen"]["sm__ops_path_tensor_src_fp8.sum"] is False
    ops = {o["op"]: o for o in result["ops"]}
    assert ops["selftest.gemm_bf16"]["flop_ratio"] == pytest.approx(1.0)
    assert ops["selftest.axpy_fp32"]["flop_ratio"] == pytest.approx(1.0)
    assert ops["selftest.axpy_fp32"]["excess_traffic"] == pytest.approx(1.0)
    assert result["ncu_command"][0].endswith("ncu") and "-c" not in result["ncu_command"]
    assert json.loads((tmp_path / "st" / "counters_selftest.json").read_text())["passed"] is True
