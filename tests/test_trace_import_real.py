"""Imported real GPU traces (public, see tests/fixtures/traces/SOURCES.md): kernels joined
to the ops the trace itself links, the recording GPU's datasheet, one time window, the
torch 1.8/1.9 format, readable kernel names. Each check reads the file independently."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from roofprof.errors import ConfigError  # noqa: E402
from roofprof.tracing.chrome import import_trace  # noqa: E402
from roofprof.tracing.kernels import union_s  # noqa: E402

TRACES = Path(__file__).parent / "fixtures" / "traces"
A100 = TRACES / "a100_torch1.12_hta_trace_diff_control.json.gz"
V100 = TRACES / "v100_torch1.9_kineto_resnet50.json.gz"
H100 = TRACES / "h100_torch2_tracelens_bert_small.json.gz"
B200 = TRACES / "b200_torch2_tracelens_vllm_eager.json.gz"
A100_STREAMS = TRACES / "a100_torch1.12_hta_concurrent_streams.json.gz"
MI300X = TRACES / "mi300x_torch2_tracelens_bert_small.json.gz"
OPS = ("cpu_op", "Operator")
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
LAUNCH = ("cuda_runtime", "cuda_driver", "Runtime")


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _linked(path: Path) -> dict[int, dict | None]:
    """Device interval index -> the op the trace links it to: the innermost op (shortest
    span) on the launching thread around the launch with the same correlation, else the
    op whose External id the interval names (torch 1.8/1.9, 2.1+)."""
    ev = _events(path)
    ops = [e for e in ev if e.get("cat") in OPS]
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") in LAUNCH}
    by_ext = {e["args"].get("External id"): e for e in ops}
    out: dict[int, dict | None] = {}
    for i, k in enumerate(e for e in ev if e.get("cat") in DEVICE):
        a = k["args"]
        rt = launch.get(a.get("correlation"))
        if rt is not None:
            around = [
                o
                for o in ops
                if o["tid"] == rt["tid"] and o["ts"] <= rt["ts"] <= o["ts"] + o["dur"]
            ]
            out[i] = min(around, key=lambda o: o["dur"]) if around else None
        else:
            ext = a.get("External id", a.get("external id"))
            out[i] = by_ext.get(ext) if ext != a.get("correlation") else None
    return out


def _kernel_rows(result) -> dict[str, tuple[int, float]]:
    return {r.op[len("kernel::") :]: (r.count, r.time_s) for r in result.ops if r.kind == "kernel"}


@pytest.mark.parametrize(
    "path",
    [A100, A100_STREAMS, V100, H100, B200, MI300X],
    ids=["a100", "a100-streams", "v100", "h100", "b200", "mi300x"],
)
def test_kernels_join_the_ops_the_trace_links(path):
    """Every device interval the trace links to an op is joined; the rest are kernel-only
    rows whose count and time equal an independent reading of the file."""
    linked = _linked(path)
    devices = [e for e in _events(path) if e.get("cat") in DEVICE]
    joined = sum(1 for op in linked.values() if op is not None)
    result = import_trace(path)
    assert f"{joined} of {len(devices)} device intervals joined to a recorded op" in (
        result.summary.notes
    )
    assert joined > len(devices) / 2
    loose: dict[str, list[tuple[int, int]]] = {}
    for i, k in enumerate(devices):
        if linked[i] is None:
            loose.setdefault(k["name"], []).append((k["ts"], k["ts"] + k["dur"]))
    rows = _kernel_rows(result)
    assert set(rows) == set(loose)
    for name, spans in loose.items():
        assert rows[name][0] == len(spans)
        assert rows[name][1] == pytest.approx(union_s(spans) * 1e3, rel=1e-6)


def test_old_trace_joins_through_the_launch_and_attributes_kernel_time():
    """torch 1.12-2.0: a kernel's External id is its own correlation id."""
    ks = [e for e in _events(A100) if e.get("cat") == "kernel"]
    assert ks and all(k["args"]["External id"] == k["args"]["correlation"] for k in ks)
    result = import_trace(A100)
    op_time = sum(r.time_s for r in result.ops if r.kind != "kernel")
    assert op_time > 0 and result.summary.mfu_datasheet is not None


def test_no_joined_kernel_says_so_and_gives_no_mfu(tmp_path):
    """The launches removed: nothing links kernels to ops; MFU is not given."""
    with gzip.open(A100, "rt") as f:
        data = json.load(f)
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") not in LAUNCH]
    p = tmp_path / "nolaunch.json"
    p.write_text(json.dumps(data))
    from roofprof.tracing.report import summary_lines

    s = import_trace(p).summary
    assert any("rest on nothing" in n for n in s.notes)
    assert s.mfu_datasheet is None and s.mbu_datasheet is None and s.coverage is None
    result = import_trace(p)
    assert "coverage - of op time" in "\n".join(summary_lines(result))
    result.save(tmp_path / "out")
    assert "rest on nothing" in (tmp_path / "out" / "report.html").read_text()


def test_kernels_of_an_op_without_cost_rule_join_that_op():
    """vllm::moe_forward has children and no cost rule; its GEMM kernels are its own."""
    result = import_trace(B200)
    moe = [r for r in result.ops if r.op == "vllm::moe_forward"]
    assert len(moe) == 1 and "no-cost" in moe[0].flags
    linked = _linked(B200)
    devices = [e for e in _events(B200) if e.get("cat") in DEVICE]
    spans = [
        (k["ts"], k["ts"] + k["dur"])
        for i, k in enumerate(devices)
        if linked[i] is not None and linked[i]["name"] == "vllm::moe_forward"
    ]
    assert spans and moe[0].time_s == pytest.approx(union_s(spans) * 1e3, rel=1e-6)
    assert not any(r.op.startswith("kernel::bmm_") for r in result.ops)


@pytest.mark.parametrize(
    ("path", "gpu", "name"),
    [
        (A100, "a100-sxm-40gb", "NVIDIA A100-PG509-200"),
        (V100, "v100-sxm2-32gb", "Tesla V100-DGXS-32GB"),
        (H100, "h100-sxm", "NVIDIA H100 80GB HBM3"),
        (B200, "b200", "NVIDIA B200"),
        (MI300X, "mi300x", "AMD Instinct MI300X VF"),
    ],
    ids=["a100", "v100", "h100", "b200", "mi300x"],
)
def test_gpu_trace_is_placed_on_the_recording_gpu(path, gpu, name, tmp_path):
    from roofprof.gpu_specs import load_gpu

    result = import_trace(path)
    assert name in result.summary.device
    assert result.summary.roofline_source == "datasheet"
    spec = load_gpu(gpu)
    assert result.roofline is not None
    assert result.roofline.memory_bandwidth("dram") == pytest.approx(spec.memory_bytes_per_s)
    result.save(tmp_path / "out")  # the report names one roofline, the datasheet's
    assert "of the measured roofline" not in (tmp_path / "out" / "report.html").read_text()


def test_gpu_override_and_unknown_gpu(tmp_path, capsys):
    from roofprof.cli import main
    from roofprof.gpu_specs import load_gpu

    r = import_trace(A100, gpu="h100-sxm")
    assert r.roofline.memory_bandwidth("dram") == pytest.approx(
        load_gpu("h100-sxm").memory_bytes_per_s
    )
    with gzip.open(A100, "rt") as f:
        data = json.load(f)
    for d in data["deviceProperties"]:
        d["name"], d["numSms"] = "NVIDIA Z999", 7
    p = tmp_path / "z999.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="NVIDIA Z999.*h100-sxm"):
        import_trace(p)
    code = main(["trace", "--import", str(p), "--roofline", "spec"])
    assert code == 2
    assert "--gpu ID" in capsys.readouterr().err
    assert main(["trace", "--import", str(p), "--gpu", "a100-sxm-40gb", "-f", "json"]) == 0
    capsys.readouterr()
    assert main(["trace", "--import", str(A100), "--roofline", "spec", "-f", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["roofline_source"] == "datasheet" and "A100" in summary["device"]
    assert main(["trace", "--import", str(H100)]) == 0
    text = capsys.readouterr().out
    assert "of the datasheet roofline" in text and "measured roofline" not in text


def test_gpu_trace_without_device_properties(tmp_path, capsys):
    """Device kernels but no deviceProperties: not placed on the importing machine."""
    from roofprof.cli import main

    with gzip.open(H100, "rt") as f:
        data = json.load(f)
    del data["deviceProperties"]
    p = tmp_path / "noprops.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="no deviceProperties.*--gpu ID"):
        import_trace(p)
    assert main(["trace", "--import", str(p)]) == 2
    assert "--gpu ID" in capsys.readouterr().err
    s = import_trace(p, roofline="none").summary
    assert "cpu" not in s.device.lower() and s.mfu_datasheet is None
    s = import_trace(p, gpu="h100-sxm").summary
    assert s.roofline_source == "datasheet" and s.mfu_datasheet is not None


def test_one_window_for_op_and_device_time():
    """Kernels still running from before the first recorded op count inside the wall."""
    ev = _events(A100)
    ops = [e for e in ev if e.get("cat") in OPS]
    devices = [e for e in ev if e.get("cat") in DEVICE]
    assert min(k["ts"] for k in devices) < min(o["ts"] for o in ops)
    span = [*ops, *devices]
    wall = (max(e["ts"] + e["dur"] for e in span) - min(e["ts"] for e in span)) * 1e-6
    s = import_trace(A100).summary
    assert s.wall_s == pytest.approx(wall)
    assert s.op_time_s <= s.wall_s


def test_op_time_on_concurrent_streams_stays_inside_the_wall():
    """NCCL and compute kernels overlap on two streams: the ops' own times add up to more
    than the window; op time is the device's busy time (the union of every interval)."""
    ev = _events(A100_STREAMS)
    devices = [e for e in ev if e.get("cat") in DEVICE]
    linked = _linked(A100_STREAMS)
    per_op: dict[int, list[tuple[int, int]]] = {}
    for i, k in enumerate(devices):
        key = id(linked[i]) if linked[i] is not None else hash(k["name"])
        per_op.setdefault(key, []).append((k["ts"], k["ts"] + k["dur"]))
    span = [*(e for e in ev if e.get("cat") in OPS), *devices]
    wall = (max(e["ts"] + e["dur"] for e in span) - min(e["ts"] for e in span)) * 1e-6
    busy = union_s([(k["ts"], k["ts"] + k["dur"]) for k in devices]) * 1e3
    assert sum(union_s(v) * 1e3 for v in per_op.values()) > wall  # the overlap is real
    s = import_trace(A100_STREAMS).summary
    assert s.wall_s == pytest.approx(wall) and s.op_time_s == pytest.approx(busy)
    assert s.op_time_s <= s.wall_s and s.unattributed_s == pytest.approx(wall - busy)
    assert any("concurrent streams" in n for n in s.notes)
    assert s.coverage is not None and 0 <= s.coverage <= 1


def test_torch_1_9_trace_is_read_with_its_own_categories():
    cats = {e.get("cat") for e in _events(V100)}
    assert {"Operator", "Kernel", "Runtime"} <= cats and "cpu_op" not in cats
    result = import_trace(V100)
    # a 7x7 convolution's stride is not recorded in 1.9: not costed rather than costed wrong
    convs = [r for r in result.ops if "conv" in r.op and r.shapes[:1] == ((32, 3, 224, 224),)]
    assert convs and all(r.flops is None for r in convs)
    bn = [r for r in result.ops if r.op == "aten::batch_norm"]
    assert bn and all(r.flops is not None for r in bn)


def test_linear_flops_match_a_hand_count():
    """bert-small on an H100: x 1x141x512 @ W 512x512 + bias."""
    rows = [
        r
        for r in import_trace(H100).ops
        if r.op == "aten::linear" and r.shapes[:2] == ((1, 141, 512), (512, 512))
    ]
    assert rows and rows[0].flops == pytest.approx(2 * 141 * 512 * 512 + 141 * 512, rel=0.01)


def test_one_model_on_two_vendors_gets_the_same_costs():
    """bert-small, batch 1, bf16, recorded on an H100 (CUDA) and an MI300X (ROCm): other
    kernels, the same ops and shapes, so the same FLOPs and bytes per signature."""

    def costs(path):
        return {
            (r.op, r.shapes): (r.count, r.flops, r.bytes)
            for r in import_trace(path).ops
            if r.kind != "kernel"
        }

    h100, mi300x = costs(H100), costs(MI300X)
    assert h100 == mi300x and sum(1 for c in h100.values() if c[1]) >= 5


def test_demangled_kernel_names_are_shortened_readably():
    from roofprof.tracing.report import short_name

    names = {short_name(r.op) for r in import_trace(A100).ops if r.kind == "kernel"}
    assert all("(" not in n and ")" not in n and not n.startswith("{") for n in names)
    assert any(n.startswith("ncclKernel") for n in names)
    table = import_trace(A100).table()
    assert "ncclKernel_SendRecv_RING_SIMPLE_S…" in table  # cut on the right, marked


@pytest.mark.parametrize("path", [H100, B200], ids=["h100", "b200"])
def test_launch_join_agrees_with_the_external_id_link(path):
    """torch 2.x records both links: a kernel's ``External id`` names its op, and its launch
    lies inside that op; the innermost op around the launch is the op the id names."""
    ev = _events(path)
    by_ext = {o["args"]["External id"]: o for o in ev if o.get("cat") in OPS}
    linked = _linked(path)
    pairs = [
        (linked[i], by_ext.get(k["args"].get("External id")))
        for i, k in enumerate(e for e in ev if e.get("cat") in DEVICE)
        if linked[i] is not None
    ]
    assert pairs and all(a == b for a, b in pairs)


def test_a_trace_older_than_torch_1_8_is_refused_naming_the_range(tmp_path):
    """The legacy autograd profiler's export (before Kineto) has no op categories."""
    legacy = [
        {"name": "aten::mm", "ph": "X", "ts": 0, "dur": 5, "tid": 1, "pid": "CPU functions"},
        {"name": "aten::add", "ph": "X", "ts": 6, "dur": 2, "tid": 1, "pid": "CPU functions"},
    ]
    p = tmp_path / "legacy.json"
    p.write_text(json.dumps(legacy))
    with pytest.raises(ConfigError, match="torch 1.8 and later"):
        import_trace(p)
