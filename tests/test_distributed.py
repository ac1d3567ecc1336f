"""roofprof.distributed: rendezvous parsing, the collective loop with fakes, fits, the loader,
and `roofprof collectives --ranks 2 --device cpu` end to end (structure, not timing)."""

from __future__ import annotations

import json
import os

import pytest

from roofprof.distributed import bench, ranks
from roofprof.distributed.bench import (
    CollectiveSample,
    fit_alpha_beta,
    fits,
    log_sizes,
    measure_collectives,
)
from roofprof.distributed.ranks import RankContext, RankError, torchrun_rendezvous
from roofprof.errors import ConfigError, RoofprofError
from roofprof.prediction.collectives import busbw_factor, load_collectives

pytestmark = pytest.mark.slow  # subprocesses, ranks or pinned installs: seconds each

torch = pytest.importorskip("torch")


def test_rendezvous_from_the_torchrun_environment():
    env = {
        "RANK": "3",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "node0",
        "MASTER_PORT": "29500",
    }
    rdv = torchrun_rendezvous(env)
    assert (rdv.rank, rdv.world_size, rdv.local_rank, rdv.local_world_size) == (3, 8, 1, 2)
    assert rdv.init_method == "env://"
    assert torchrun_rendezvous({"WORLD_SIZE": "2"}) is None
    with pytest.raises(RankError, match="MASTER_ADDR"):
        torchrun_rendezvous({"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(RankError, match="malformed"):
        torchrun_rendezvous({**env, "RANK": "x"})
    with pytest.raises(RankError, match="outside"):
        torchrun_rendezvous({**env, "RANK": "9"})


def test_one_rank_and_too_many_ranks_are_refused_before_starting():
    with pytest.raises(RankError, match="nothing to measure"):
        ranks.launch(_noop, ranks=1, device="cpu")
    with pytest.raises(RankError, match="cores"):
        ranks.launch(_noop, ranks=100_000, device="cpu")
    with pytest.raises(ConfigError, match="backend"):
        ranks.device_type("tpu")
    assert issubclass(RankError, RoofprofError)


def _noop(ctx):  # pragma: no cover - never started
    return None


class _FakeDist:
    """Records calls; all_reduce sums as if every rank had the same vector (world ranks)."""

    class ReduceOp:
        MAX = "max"

    def __init__(self, world: int):
        self.world, self.calls = world, []

    def all_reduce(self, t, op=None):
        self.calls.append(("all_reduce", t.numel(), op))
        if op is None:
            t.mul_(self.world)

    def all_gather_into_tensor(self, out, inp):
        assert out.numel() == inp.numel() * self.world
        self.calls.append(("all_gather", out.numel()))

    def reduce_scatter_tensor(self, out, inp):
        assert inp.numel() == out.numel() * self.world
        self.calls.append(("reduce_scatter", inp.numel()))

    def barrier(self):
        self.calls.append(("barrier",))

    isend = irecv = object()

    class P2POp:
        def __init__(self, fn, t, peer):
            self.peer = peer

    def batch_isend_irecv(self, ops):
        self.calls.append(("send", [o.peer for o in ops]))
        return []


class _FakeTimer:
    path = "eager"

    def time(self, fn, calls):
        for _ in range(calls):
            fn()
        return 1e-3


def test_the_measuring_loop_with_fakes():
    ctx = RankContext(0, 4, 0, "cpu", "gloo", 10.0)
    fake = _FakeDist(4)
    samples = measure_collectives(
        ctx, sizes=(1024, 4096), warmup=1, calls=3, timers=(_FakeTimer(),), dist=fake, torch=torch
    )
    assert [(s.op, s.bytes) for s in samples] == [(op, b) for op in bench.OPS for b in (1024, 4096)]
    s = samples[0]
    assert (
        s.seconds == pytest.approx(1e-3) and s.seconds_max == pytest.approx(1e-3) and s.calls == 3
    )
    assert s.busbw == pytest.approx(1024 / 1e-3 * busbw_factor("all_reduce", 4))
    assert ("send", [1, 3]) in fake.calls  # ring: to the next rank, from the previous one
    assert sum(1 for c in fake.calls if c[0] == "barrier") == 8
    row = s.to_row()
    assert {
        "op",
        "bytes",
        "ranks",
        "seconds",
        "seconds_max",
        "algbw",
        "busbw",
        "backend",
        "path",
    } <= set(row)


def test_sizes_are_rounded_to_whole_elements_per_rank():
    fn, size = bench.op_call(_FakeDist(3), torch, "all_gather", 1000, 0, 3, "cpu")
    assert size == 83 * 3 * 4
    with pytest.raises(ConfigError, match="unknown collective"):
        bench.op_call(_FakeDist(2), torch, "alltoall", 1000, 0, 2, "cpu")
    assert log_sizes(1 << 10, 1 << 30)[-1] == 1 << 30 and len(log_sizes(1 << 10, 1 << 30)) == 21
    with pytest.raises(ConfigError):
        log_sizes(10, 1)


def test_timers_offered_per_device_type():
    assert [t.path for t in bench.timers_for("cpu")] == ["eager"]
    assert [t.path for t in bench.timers_for("cuda:1")] == ["eager", "graph"]
    assert [t.path for t in bench.timers_for("cuda:0", ["graph"])] == ["graph"]
    with pytest.raises(ConfigError, match="graph"):
        bench.timers_for("cpu", ["graph"])


def test_alpha_beta_fit_recovers_a_line():
    alpha, beta = 20e-6, 1 / 400e9
    pts = [(s, alpha + beta * s) for s in log_sizes(1 << 10, 1 << 30, 4)]
    fit = fit_alpha_beta(pts)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-6) and fit[
        "beta_s_per_byte"
    ] == pytest.approx(beta, rel=1e-6)
    samples = [CollectiveSample("all_reduce", int(s), 8, t, t, "nccl", "eager", 5) for s, t in pts]
    (f,) = fits(samples)
    assert f["busbw_bytes_per_s"] == pytest.approx(busbw_factor("all_reduce", 8) * 400e9, rel=1e-6)
    flat = fit_alpha_beta([(1e3, 1e-3), (1e6, 0.9e-3)])
    assert flat["beta_s_per_byte"] == 0.0 and flat["alpha_s"] > 0
    with pytest.raises(ConfigError):
        fit_alpha_beta([(1.0, 1.0)])


def test_loader_keeps_old_files_and_splits_paths(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(
        json.dumps(
            [
                {"op": "all_reduce", "bytes": 1024, "ranks": 2, "seconds": 1e-5},
                {"op": "all_reduce", "bytes": 4096, "ranks": 2, "seconds": 2e-5},
            ]
        )
    )
    assert load_collectives(old).seconds("all_reduce", 2048, 2) == pytest.approx(
        2**-0.5 * 2e-5, rel=1e-6
    )
    new = tmp_path / "new.json"
    rows = [
        CollectiveSample("all_reduce", 1024, 2, t, t, "nccl", p, 5).to_row()
        for p, t in (("eager", 1e-5), ("graph", 4e-6), ("eager", 3e-5))
    ]
    new.write_text(json.dumps({"results": rows}))
    assert load_collectives(new).seconds("all_reduce", 1024, 2) == pytest.approx(
        2e-5
    )  # eager, averaged
    assert load_collectives(new, execution="graph").seconds("all_reduce", 1024, 2) == pytest.approx(
        4e-6
    )
    with pytest.raises(ConfigError, match="paths there: eager, graph"):
        load_collectives(new, execution="other")


def _dies(ctx):  # runs in a spawned rank
    if ctx.rank == 1:
        os._exit(3)
    import torch.distributed as dist

    dist.barrier()  # would wait for rank 1 forever without the group timeout


def _fails(ctx):  # runs in a spawned rank
    if ctx.rank == 1:
        raise ConfigError("rank 1 found something wrong")
    return "fine"


@pytest.mark.slow
def test_a_rank_that_dies_or_fails_is_one_error_and_nothing_is_left():
    import time

    before = set(_children())
    t0 = time.monotonic()
    with pytest.raises(RankError, match=r"rank 1 died \(exit code 3\)"):
        ranks.launch(_dies, ranks=2, device="cpu", timeout_s=20)
    print(f"died after {time.monotonic() - t0:.1f} s")
    with pytest.raises(RankError, match="rank 1 found something wrong"):
        ranks.launch(_fails, ranks=2, device="cpu", timeout_s=20)
    assert set(_children()) <= before


def _children() -> list[int]:
    """This process's spawned ranks still alive (multiprocessing's resource tracker aside)."""
    try:
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as fh:
            pids = [int(p) for p in fh.read().split()]
    except OSError:
        return []
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"spawn_main" in fh.read():
                    alive.append(pid)
        except OSError:
            pass
    return alive


def test_collectives_verb_two_gloo_ranks(tmp_path, monkeypatch):
    from roofprof.cli import main

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    out = tmp_path / "coll"
    rc = main(
        [
            "collectives",
            "--ranks",
            "2",
            "--device",
            "cpu",
            "--max-bytes",
            "4KiB",
            "--warmup",
            "1",
            "--calls",
            "2",
            "--no-plots",
            "-o",
            str(out),
            "--format",
            "json",
        ]
    )
    assert rc == 0
    payload = json.loads((out / "collectives.json").read_text())
    rows = payload["results"]
    assert {r["op"] for r in rows} == set(bench.OPS)
    assert {r["bytes"] for r in rows if r["op"] == "all_reduce"} == {1024, 2048, 4096}
    assert all(r["ranks"] == 2 and r["backend"] == "gloo" and r["path"] == "eager" for r in rows)
    assert all(r["seconds"] > 0 and r["seconds_max"] >= r["seconds"] * 0.999 for r in rows)
    assert {f["op"] for f in payload["fits"]} == set(bench.OPS)
    table = load_collectives(out / "collectives.json")  # what predict --collectives reads
    assert table.seconds("all_reduce", 2048, 2) > 0


def test_collectives_verb_refuses_one_rank(capsys):
    from roofprof.cli import main

    assert main(["collectives", "--ranks", "1", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "nothing to measure" in err and err.count("\n") == 1


class _FakeCuda:
    """torch.cuda as the CUDA timers use it: events 2 ms apart, a graph that replays its calls."""

    def __init__(self):
        self.log = []
        fake = self

        class Event:
            clock = [0.0]

            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                Event.clock[0] += 2.0
                self.t = Event.clock[0]
                fake.log.append("record")

            def synchronize(self):
                fake.log.append("event-sync")

            def elapsed_time(self, other):
                return other.t - self.t  # ms

        class CUDAGraph:
            def __init__(self):
                self.captured = []

            def replay(self):
                fake.log.append("replay")
                for f in self.captured:
                    f()

        class _Ctx:
            def __init__(self, on_enter=None):
                self.on_enter = on_enter

            def __enter__(self):
                if self.on_enter:
                    self.on_enter()

            def __exit__(self, *exc):
                fake.capturing = None

        self.Event, self.CUDAGraph, self.capturing = Event, CUDAGraph, None
        self.Stream = lambda: "side-stream"
        self.stream = lambda s: _Ctx()

        def graph(g, stream=None):
            return _Ctx(lambda: setattr(fake, "capturing", g))

        self.graph = graph

    def synchronize(self):
        self.log.append("sync")


class _FakeTorch:
    def __init__(self):
        self.cuda = _FakeCuda()


def test_cuda_timers_with_a_fake_torch():
    fake = _FakeTorch()
    calls = []

    def fn():
        if fake.cuda.capturing is not None:
            fake.cuda.capturing.captured.append(lambda: calls.append("replayed"))
        else:
            calls.append("eager")

    t = bench.CudaEventTimer(torch_module=fake).time(fn, 4)
    assert t == pytest.approx(2e-3 / 4) and calls == ["eager"] * 4 and fake.cuda.log[0] == "sync"
    calls.clear()
    t = bench.CudaGraphTimer(torch_module=fake).time(fn, 5)
    assert t == pytest.approx(2e-3 / 5)
    assert calls == ["eager"] + ["replayed"] * 10  # one warm call, a warm replay, the timed replay
    assert fake.cuda.log.count("replay") == 2


def test_gpu_result_has_the_datasheet_line_and_writes_what_predict_reads(tmp_path, monkeypatch):
    from roofprof.distributed import interconnect

    monkeypatch.setattr(interconnect, "nvidia_topology", lambda: "GPU0\tX\tNV18\nGPU1\tNV18\tX\n")
    samples = [
        CollectiveSample(op, b, 8, 20e-6 + b / 360e9, 22e-6 + b / 350e9, "nccl", path, 20)
        for op in bench.OPS
        for path in ("eager", "graph")
        for b in log_sizes(1 << 10, 1 << 30, 8)
    ]
    result = interconnect.interconnect_result(
        samples, 8, "nccl", "NVIDIA H100 80GB HBM3", "h100-sxm"
    )
    assert result.spec_id == "h100-sxm" and set(result.datasheet_busbw) == set(bench.OPS)
    written = interconnect.write_interconnect(result, tmp_path)
    assert sorted(p.name for p in written) == [
        "collectives.json",
        "collectives.png",
        "topology.txt",
    ]
    assert (tmp_path / "collectives.png").read_bytes()[:4] == b"\x89PNG"
    table = load_collectives(tmp_path / "collectives.json")
    assert table.seconds("all_reduce", 1 << 19, 8) == pytest.approx(
        20e-6 + (1 << 19) / 360e9, rel=1e-6
    )
    payload = json.loads((tmp_path / "collectives.json").read_text())
    assert payload["topology"].startswith("GPU0") and len(payload["fits"]) == 2 * len(bench.OPS)
    unknown = interconnect.interconnect_result(samples[:2], 8, "nccl", "Mystery GPU")
    assert unknown.datasheet_busbw == {} and "no datasheet" in unknown.notes[0]
