"""``roofprof.trace`` and ``roofprof trace``: window and steps, modules, replays, placement,
result files, the GPU profiler join (fake events), the CLI and its bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import roofprof  # noqa: E402
from roofprof.cli import main  # noqa: E402
from roofprof.roofline import Ceiling, Roofline  # noqa: E402
from roofprof.tracing.tracer import Tracer  # noqa: E402

ROOFLINE = Roofline(
    "test cpu",
    (
        Ceiling("fp32 peak", "compute", 1e11, dtype="fp32", source="measured"),
        Ceiling("DRAM", "memory", 1e10, level="dram", source="measured"),
    ),
)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(32, 64)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(64, 32)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


def test_facade_exports_trace_and_module_is_callable():
    assert "trace" in roofprof.__all__
    assert callable(roofprof.trace)
    assert isinstance(roofprof.trace(device="cpu", roofline="none"), Tracer)
    assert callable(roofprof.trace.region) and callable(roofprof.trace.register_cost)


def test_steps_warmup_modules_and_result():
    m, x = MLP(), torch.randn(8, 32)
    with roofprof.trace(
        device="cpu", roofline=ROOFLINE, warmup=1, steps=2, replay_budget_s=0.002
    ) as t:
        for _ in range(4):
            m(x).sum().backward()
            t.step()
    r = t.result
    addmm = [o for o in r.ops if o.op == "aten::addmm"]
    assert addmm and all(o.count == 2 for o in addmm)  # steps 1 and 2 only
    assert all(o.replay_s is not None and o.replay_s > 0 for o in addmm)
    assert all(o.roof in ("fp32 compute", "dram") and o.percent_of_roof is not None for o in addmm)
    modules = {(mr.module, mr.phase) for mr in r.modules}
    assert ("MLP.up", "forward") in modules and any(p == "backward" for _, p in modules)
    s = r.summary
    assert s.calls == sum(o.count for o in r.ops) and s.unique_ops == len(r.ops)
    assert 0 < s.op_time_s <= s.wall_s and 0.9 <= s.coverage <= 1.0
    assert s.mfu_measured is not None and s.mfu_datasheet is None  # a CPU has no datasheet
    df = r.to_dataframe()
    assert len(df) == len(r.ops) and "percent_of_roof" in df.columns
    assert "addmm" in r.table()


def test_save_and_plot(tmp_path):
    with roofprof.trace(device="cpu", roofline=ROOFLINE, replay=False) as t:
        torch.randn(64, 64) @ torch.randn(64, 64)
    written = t.result.save(tmp_path / "out")
    assert {"trace.json", "ops.csv", "modules.csv", "roofline.png", "report.html"} <= set(written)
    payload = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert payload["summary"]["flops"] == 2 * 64**3
    page = (tmp_path / "out" / "report.html").read_text()
    for part in (
        "<h2>Roofline</h2>",
        "data:image/png;base64,",
        "MFU / MBU",
        "coverage",
        "<h2>Ops",
        "<h2>Modules</h2>",
        "measured",
        "aten::mm",
    ):
        assert part in page, part
    assert t.result.plot(tmp_path / "r.png").stat().st_size > 0


def test_no_roofline_leaves_roof_empty():
    with roofprof.trace(device="cpu", roofline="none", replay=False) as t:
        torch.randn(4, 4).exp()
    assert all(o.roof == "-" for o in t.result.ops)
    with pytest.raises(roofprof.RoofprofError):
        t.result.plot("x.png")


def test_region_and_unknown_region():
    with roofprof.trace(device="cpu", roofline="none", replay=False, region="fwd") as t:
        torch.randn(3).exp()  # outside: not recorded
        with roofprof.trace.region("fwd"):
            torch.randn(3, 3).sin()
    assert {o.op for o in t.result.ops} == {"aten::randn", "aten::sin"}
    with pytest.raises(roofprof.RoofprofError, match="never occurred"):
        with roofprof.trace(device="cpu", roofline="none", region="nope"):
            torch.randn(3)


def test_flags_replay_disagreement_and_cache_resident():
    slow = Roofline(
        "slow",
        (Ceiling("c", "compute", 1e9, dtype="fp32"), Ceiling("d", "memory", 1e6, level="dram")),
    )
    with roofprof.trace(device="cpu", roofline=slow, replay_budget_s=0.002) as t:
        torch.randn(256, 256).exp()
    exp = next(o for o in t.result.ops if o.op == "aten::exp")
    assert "cache-resident" in exp.flags  # far above a 1 MB/s "DRAM" roof


def test_gpu_join_of_pending_calls():
    from roofprof.tracing.kernels import HostEvent, KernelEvent
    from roofprof.tracing.tracer import SignatureStats

    t = Tracer(device="cpu", roofline="none")
    stats = SignatureStats("aten::mm", "default", (), (), None, None, None, count=1)
    t._pending = [(0, stats, ("M", "forward"))]
    t._join(
        [HostEvent(1, "roofprof#0", 0, 100), HostEvent(2, "aten::mm", 10, 90)],
        [KernelEvent("gemm", 1000, 21000, 2)],
    )
    assert stats.time_s == pytest.approx(2e-5) and stats.modules[("M", "forward")][
        1
    ] == pytest.approx(2e-5)


# -- CLI -------------------------------------------------------------------------------------
def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


SCRIPT = """
import sys, torch, roofprof.tracing as rt
m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
print("ARGS", sys.argv[1:])
for _ in range(3):
    with rt.region("fwd"):
        with torch.no_grad():
            m(torch.randn(4, 16))
"""


@pytest.fixture
def script(tmp_path) -> Path:
    p = tmp_path / "model.py"
    p.write_text(SCRIPT)
    return p


def test_cli_trace_script_formats_and_out(capsys, script, tmp_path):
    code, out, err = run_cli(
        capsys,
        "trace",
        str(script),
        "--device",
        "cpu",
        "--roofline",
        "none",
        "--no-replay",
        "--region",
        "fwd",
        "--warmup",
        "1",
        "--format",
        "json",
        "--out",
        str(tmp_path / "o"),
        "--",
        "--flag",
        "7",
    )
    assert code == 0, err
    assert "ARGS ['--flag', '7']" in err and "ARGS" not in out  # the script's prints: stderr
    payload = json.loads(out)  # stdout is roofprof's JSON alone
    assert all(o["count"] == 2 for o in payload["ops"] if o["op"] == "aten::addmm")
    assert (tmp_path / "o" / "report.html").exists()
    code, out, err = run_cli(
        capsys,
        "trace",
        str(script),
        "--device",
        "cpu",
        "--roofline",
        "none",
        "--no-replay",
        "--format",
        "csv",
    )
    assert code == 0 and "op,shapes" in out and "aten::addmm" in out


def test_cli_script_error_is_the_users_and_writes_nothing(capsys, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nx = torch.randn(2)\nraise ValueError('boom in user code')\n")
    code, out, err = run_cli(
        capsys,
        "trace",
        str(bad),
        "--device",
        "cpu",
        "--roofline",
        "none",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 1
    assert "boom in user code" in err and "the script's own" in err and str(bad) in err
    assert "roofprof/trace" not in err.split("Traceback", 1)[1]
    assert not (tmp_path / "o").exists()


def test_cli_bad_input_one_line_exit_2(capsys, script, tmp_path):
    code, _, err = run_cli(
        capsys, "trace", str(script), "--device", "cpu", "--roofline", "none", "--region", "nope"
    )
    ours = [line for line in err.strip().splitlines() if not line.startswith("ARGS")]
    assert code == 2 and "never occurred" in err and len(ours) == 1  # ARGS: the script's
    code, out, err = run_cli(capsys, "trace", str(script), "--device", "cpu", "--roofline", "spec")
    assert code == 2 and "no datasheet roofline" in err and "ARGS" not in out  # before the run
    code, out, err = run_cli(
        capsys,
        "trace",
        str(script),
        "--device",
        "cpu",
        "--roofline",
        str(tmp_path / "missing.json"),
    )
    assert code == 2 and "ARGS" not in out
    code, _, err = run_cli(capsys, "trace", str(script), "--device", "cpu", "--counters")
    assert code == 2 and "needs a GPU" in err
    code, _, err = run_cli(capsys, "trace", "--import", str(script))
    assert code == 2 and "not a JSON trace" in err
    (tmp_path / "other.json").write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "x"}]}))
    code, _, err = run_cli(capsys, "trace", "--import", str(tmp_path / "other.json"))
    assert code == 2 and "not a torch profiler trace" in err
    code, _, err = run_cli(capsys, "trace")
    assert code == 2 and "give a script" in err


def _profile(path: Path, shapes: bool) -> Path:
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as p:
        m(torch.randn(4, 16)).sum()
    p.export_chrome_trace(str(path))
    return path


def test_cli_import_profiler_trace(capsys, tmp_path):
    code, out, err = run_cli(
        capsys,
        "trace",
        "--import",
        str(_profile(tmp_path / "t.json", True)),
        "--device",
        "cpu",
        "--roofline",
        "none",
        "--format",
        "json",
    )
    assert code == 0, err
    payload = json.loads(out[out.index("{") :])
    # each nn.Linear counted once, by the outermost op with a cost rule (aten::linear)
    linear = [o for o in payload["ops"] if o["op"] in ("aten::linear", "aten::addmm")]
    assert sorted(o["flops"] for o in linear) == [2 * 4 * 16 * 32] * 2
    assert {o["op"] for o in linear} == {"aten::linear"}
    code, _, err = run_cli(capsys, "trace", "--import", str(_profile(tmp_path / "n.json", False)))
    assert code == 2 and "no shapes" in err and "record_shapes=True" in err


def test_import_kernels_joined_and_unattributed(tmp_path):
    from roofprof.tracing.chrome import import_trace

    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 50,
            "args": {
                "Input Dims": [[8, 16], [16, 4]],
                "Input type": ["float", "float"],
                "Concrete Inputs": ["", ""],
                "External id": 7,
            },
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm_kernel",
            "pid": 0,
            "tid": 7,
            "ts": 10,
            "dur": 30,
            "args": {"External id": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "triton_fused",
            "pid": 0,
            "tid": 7,
            "ts": 45,
            "dur": 20,
            "args": {"external id": 99},
        },
    ]
    p = tmp_path / "gpu.json"
    p.write_text(json.dumps({"traceEvents": events}))
    r = import_trace(p, device="cpu", roofline="none")
    mm = next(o for o in r.ops if o.op == "aten::mm")
    assert mm.time_s == pytest.approx(30e-6) and mm.flops == 2 * 8 * 16 * 4
    fused = next(o for o in r.ops if "triton_fused" in o.op)
    assert fused.time_s == pytest.approx(20e-6) and fused.flops is None  # time only, not dropped


def test_import_joins_kernels_of_inner_ops_to_the_costed_outer_op(tmp_path):
    from roofprof.tracing.chrome import import_trace

    def op(name, ts, dur, ext, dims=(), types=(), concrete=()):
        return {
            "ph": "X",
            "cat": "cpu_op",
            "name": name,
            "pid": 1,
            "tid": 1,
            "ts": ts,
            "dur": dur,
            "args": {
                "Input Dims": list(dims),
                "Input type": list(types),
                "Concrete Inputs": list(concrete),
                "External id": ext,
            },
        }

    conv = (
        [[1, 3, 8, 8], [4, 3, 3, 3], [4], [], [], [], []],
        ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Int"],
        ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"],
    )
    events = [
        op("aten::conv2d", 0, 100, 1, *conv),
        op("aten::convolution", 5, 90, 2),
        op("aten::cudnn_convolution", 10, 80, 3),
        {
            "ph": "X",
            "cat": "kernel",
            "name": "implicit_gemm",
            "pid": 0,
            "tid": 7,
            "ts": 20,
            "dur": 40,
            "args": {"External id": 3},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "implicit_gemm_tail",
            "pid": 0,
            "tid": 8,
            "ts": 50,
            "dur": 20,
            "args": {"External id": 3},
        },
    ]
    p = tmp_path / "conv.json"
    p.write_text(json.dumps({"traceEvents": events}))
    r = import_trace(p, device="cpu", roofline="none")
    (row,) = [o for o in r.ops if o.op == "aten::conv2d"]
    assert row.time_s == pytest.approx(
        50e-6
    )  # union of the inner op's two kernels, joined to conv2d
    assert row.flops == 2 * 1 * 4 * 6 * 6 * 3 * 3 * 3 and not [
        o for o in r.ops if o.op.startswith("kernel::")
    ]


def test_facade_in_a_fresh_process_gives_the_callable_module():
    import subprocess
    import sys

    code = (
        "import roofprof; t = roofprof.trace; "
        "assert callable(t) and t.register_cost and t.region and t.Cost; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_cold_replays_flush_between_calls():
    with roofprof.trace(device="cpu", roofline=ROOFLINE, cold=True, replay_budget_s=0.002) as t:
        torch.randn(128, 128).exp()
    exp = next(o for o in t.result.ops if o.op == "aten::exp")
    assert exp.replay_s is not None and exp.replay_s > 0
    assert len(t.result.to_dataframe("modules")) == len(t.result.modules)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_imported_tensor_tensor_elementwise_ops_are_costed(tmp_path, mode):
    """A real profiler trace: ``a + b`` is ``aten::add`` with two tensors recorded, so its
    overload is ``add.Tensor`` (pointwise), not ``add.default`` (two numbers, no cost)."""
    from torch.profiler import ProfilerActivity, profile

    from roofprof.tracing import import_trace

    a, b = torch.randn(64, 32), torch.randn(64, 32) + 2.0
    ctx = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
    with ctx, profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        for r in (a + b, a * b, a - b, a / b, a == b, torch.nn.Linear(32, 8)(a)):
            del r
    path = tmp_path / "elementwise.json"
    p.export_chrome_trace(str(path))
    result = import_trace(path, device="cpu", roofline="none")
    rows = {o.op: o for o in result.ops}
    for op in ("aten::add", "aten::mul", "aten::sub", "aten::div", "aten::eq"):
        assert rows[op].kind == "elementwise" and rows[op].flops == 64 * 32, op
        assert rows[op].bytes >= 3 * 64 * 32 * (1 if op == "aten::eq" else 4) * 0.66
    linear = [o for o in result.ops if o.kind == "matmul"]
    assert sum(o.flops * o.count for o in linear) == 2 * 64 * 32 * 8
