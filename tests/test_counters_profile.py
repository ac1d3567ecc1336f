"""`roofprof profile --counters`: the child pass on the CPU device, the parent with a fake ncu."""

from __future__ import annotations

import json
import sys

import pytest
from test_counters_collect import AVAILABLE, FAKE_NCU  # noqa: F401  (shared fake ncu)

from roofprof.counters.ops_pass import (
    child_command,
    counter_op_name,
    profile_counters,
    run_ops_once,
)
from roofprof.devices import select
from roofprof.models import llama_ops
from roofprof.results import write_json_atomic
from roofprof.specs import load_model


def test_child_checks_then_runs_each_distinct_op_once(tiny_model):
    w = llama_ops(tiny_model, "decode", batch=1, context_tokens=8, dtype="fp32")
    manifest = run_ops_once(w, select("cpu"), impls=["numpy"])
    ran = [e for e in manifest if e["status"] == "ran"]
    assert ran and all(e["impl"] == "numpy" and e["check"]["ok"] for e in ran)
    assert {e["op"] for e in ran} >= {"q_proj", "gate_proj", "lm_head"}
    names = [e["name"] for e in manifest]
    assert len(names) == len(
        set(names)
    )  # identical shapes measured once (q_proj and o_proj share one)
    assert "decode/q_proj@numpy" in names


def test_child_command_is_an_argument_list(tmp_path):
    cmd = child_command(
        model="llama-3.2-1b",
        phase="decode",
        batch=1,
        prompt=128,
        context=None,
        dtype="bf16",
        device="cuda:0",
        attention="fused",
        impls=["cupy"],
        manifest=tmp_path / "m.json",
    )
    assert cmd[:5] == [sys.executable, "-m", "roofprof", "counters", "ops-pass"]
    assert cmd[cmd.index("--impl") + 1] == "cupy" and "--context" not in cmd


CSV = (
    '"ID","Process ID","Process Name","Host Name",'
    '"thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",'
    '"Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC",'
    '"dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum","l1tex__t_bytes.sum",'
    '"lts__t_bytes.sum","sm__ops_path_tensor_src_bf16_dst_fp32.sum"\n'
    '"","","","","","","","","","","","","byte","byte","nsecond","byte","byte",""\n'
    '"0","1","python","h",'
    '"1  ""<default domain>:roofprof.decode_q_proj_cupy:none:none:none:none:none:none""",'
    '"gemv_bf16_m1","1","7","(256, 1, 1)","(512, 1, 1)","0","9.0",'
    '"46,137,344","8,192","20,000","40,000,000","35,000,000","33,554,432"\n'
)


def test_parent_compares_counters_with_the_workload(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ncu = bin_dir / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable))
    ncu.chmod(0o755)
    (tmp_path / "c.csv").write_text(CSV)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.delenv("ROOFPROF_NCU", raising=False)
    monkeypatch.setenv("FAKE_NCU_METRICS", ",".join(AVAILABLE))
    monkeypatch.setenv("FAKE_NCU_CSV", str(tmp_path / "c.csv"))
    monkeypatch.setenv("FAKE_NCU_ARGV", str(tmp_path / "argv.json"))
    op = next(
        o
        for o in llama_ops(load_model("llama-3.1-8b"), "decode", context_tokens=8, dtype="bf16").ops
        if o.name == "q_proj"
    )
    manifest = tmp_path / "out" / "manifest.json"
    entry = {
        "name": counter_op_name(op, "cupy"),
        "op": op.name,
        "impl": "cupy",
        "phase": "decode",
        "kind": "gemm",
        "dtype": "bf16",
        "flops": op.flops,
        "bytes": op.bytes,
        "status": "ran",
    }
    write_json_atomic(manifest, [entry])  # type: ignore[arg-type]
    with pytest.warns(Warning):
        payload = profile_counters(["true"], manifest, tmp_path / "out", compute_capability="9.0")
    (cmp,) = payload["ops"]
    assert cmp["op"] == "decode/q_proj@cupy" and cmp["kernels"] == 1
    assert cmp["flop_ratio"] == pytest.approx(33_554_432 / op.flops)
    assert cmp["excess_traffic"] == pytest.approx((46_137_344 + 8_192) / op.bytes)
    assert (tmp_path / "out" / "counters.json").is_file()
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[argv.index("--clock-control") + 1] == "none" and argv[-1] == "true"


def test_profile_counters_without_ncu_exits_2(tmp_path, monkeypatch, capsys):
    from roofprof.cli import main

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("ROOFPROF_NCU", raising=False)
    monkeypatch.setattr("roofprof.counters.collection._install_candidates", lambda: [])
    code = main(["profile", "--counters", "--device", "cpu", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 2 and "ncu" in err and len(err.strip().splitlines()) == 1


def test_child_never_runs_a_wrong_or_raising_kernel(tiny_model):
    """The engine's check (measurement.prepare_checked) records failed and raising impls."""
    from roofprof.devices.base import CheckResult

    ran = []

    class Prepared:
        def __init__(self, ok):
            self.ok = ok

        def check(self):
            return CheckResult(self.ok, 1.0, 1.0, 1e-3, "planted")

        def run(self):
            ran.append(self)

        def release(self):
            pass

    class Impl:
        def __init__(self, name, ok=True, raises=False):
            self.name, self.ok, self.raises = name, ok, raises

        def supports(self, op):
            return None if op.fn == "linear" else "GEMMs only"

        def prepare(self, op, rng):
            if self.raises:
                raise RuntimeError("boom")
            return Prepared(self.ok)

    class Dev:
        def implementations(self):
            return (Impl("good"), Impl("wrong", ok=False), Impl("raises", raises=True))

        def synchronize(self):
            pass

    w = llama_ops(tiny_model, "decode", batch=1, context_tokens=8, dtype="fp32")
    with pytest.warns(UserWarning, match="failed its correctness check"):
        manifest = run_ops_once(w, Dev())
    by = {}
    for e in manifest:
        by.setdefault(e["impl"], set()).add(e["status"])
    assert by["good"] == {"ran", "unsupported"} and by["wrong"] == {"failed", "unsupported"}
    assert by["raises"] == {"error", "unsupported"}
    assert len(ran) == sum(e["status"] == "ran" for e in manifest)
    failed = next(e for e in manifest if e["status"] == "failed")
    assert failed["check"]["ok"] is False and "reason" not in failed
    assert "boom" in next(e for e in manifest if e["status"] == "error")["reason"]
