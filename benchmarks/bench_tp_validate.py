"""Benchmark tensor-parallel validation on a CPU: ranks profiled together against alone.

``roofprof validate --tp 2 --device cpu`` runs a real two-rank plain-torch Llama over gloo
and predicts it with the ``measured`` estimator plus measured collectives. The per-rank ops
are profiled either on both ranks at once (``--rank-profile together``, the default: each op
timed while the other rank runs the same list, sharing the cores' memory system as in the
real run) or in one process alone (``--rank-profile alone``). Each round runs both in fresh
processes, alternating which goes first, after waiting for an idle machine; the figures are
the residuals (predicted ÷ real − 1) of TTFT and of the decode step, per round and their
median.

With the ranks profiled together the pass is priced as its replay meets it: each segment's
ops at the replay's time in pass order on every rank (their profiled shares kept) and each
collective timed in that rhythm. The same runs' ``measured-per-op`` prediction (the ops at
their profiled times) and ``measured-back-to-back`` (the collectives also priced back to
back) are reported beside it, with every pricing's median and spread (lowest, highest).

Target: both residuals within the single-rank targets (TTFT ±15 %, decode ±10 %) with the
ranks profiled together, medians of the rounds.

``--in-context`` instead runs one validation (ranks profiled together) and then the same
two-rank model again with every decode step under torch.profiler on both ranks: each GEMM
shape's time in the real step beside the time the prediction gave it, and the steps' wall
times, so the gap between them is placed in the ops or outside them (the collectives'
waits, the host's noise).

Usage::

    python benchmarks/bench_tp_validate.py [--rounds 3] [--out tp_validate_cpu.json]
    python benchmarks/bench_tp_validate.py --in-context [--out tp_in_context_cpu.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_cpu_roofline import QUIET_LOG, lscpu, wait_quiet  # noqa: E402

#: The command's settings (a Llama 3.2 1B cut to 2 layers: its 128,256-token vocabulary
#: keeps the decode step memory-bound on one rank's half of the LM head).
ARGS = (
    "--tp 2 --device cpu -m llama-3.2-1b --max-layers 2 --prompt 32 --steps 4 --repeats 2 "
    "--budget 0.05"
).split()
TARGET = {"ttft": 0.15, "decode": 0.10}
#: the together runs' other rows: round key -> estimator row
ALSO = {"per_op": "measured-per-op", "back_to_back": "measured-back-to-back"}


def run_once(profile: str, out: Path) -> dict:
    """One ``roofprof validate --tp 2`` in a fresh process: its residuals and real times."""
    cmd = [sys.executable, "-m", "roofprof", "validate", *ARGS, "--rank-profile", profile]
    subprocess.run([*cmd, "-o", str(out), "-f", "json"], check=True, capture_output=True)
    d = json.loads(out.read_text())
    rows = {r["estimator"]: r for r in d["comparison"]}
    measured = rows["measured"]
    return {
        # the same run's other pricings (together only): each segment's ops at their profiled
        # times, and with the collectives also priced back to back
        **{
            key: None
            if label not in rows
            else {k: rows[label][k] for k in ("ttft_residual", "decode_residual")}
            for key, label in ALSO.items()
        },
        "collectives_in_rhythm": d.get("collectives_in_rhythm", []),
        "ttft_residual": measured["ttft_residual"],
        "decode_residual": measured["decode_residual"],
        # the band of the host's own noise (the real passes' spread and their drift across the
        # profile, where they were timed again after it) and whether each residual is within it
        **{
            k: measured.get(k)
            for k in (
                "prefill_noise_band",
                "decode_noise_band",
                "ttft_within_noise",
                "decode_within_noise",
            )
        },
        "host_drift": d.get("host_drift"),
        "real_ttft_s": d["real"]["prefill_s"],
        "real_decode_s": d["real"]["decode_s"],
        "predicted_ttft_s": measured["ttft_s"],
        "predicted_decode_s": measured["decode_step_s"],
        "notes": d["notes"],
        "load_average_start_end": d.get("load_average_start_end"),
    }


#: The two-rank model of ``ARGS`` (for ``--in-context``): layers, prompt, decode steps.
IN_CONTEXT = {"model": "llama-3.2-1b", "layers": 2, "prompt": 32, "steps": 12}


def _rank_in_context(rank: int, world: int, port: int, queue) -> None:  # runs on every rank
    """Decode steps of the two-rank model under torch.profiler: per-shape GEMM times of the
    fastest step and every step's wall time, put on ``queue``."""
    import collections
    import dataclasses
    import os
    import time

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from roofprof.distributed.tp_model import TPLlama, torch_comm
    from roofprof.models.llama_torch import KVCache, TorchLlama
    from roofprof.specs import load_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    spec = dataclasses.replace(load_model(IN_CONTEXT["model"]), num_layers=IN_CONTEXT["layers"])
    full = TorchLlama(spec, dtype=torch.float32, device="cpu")
    shard = TPLlama(full, rank, world, torch_comm())
    del full
    ids = torch.randint(0, spec.vocab_size, (1, IN_CONTEXT["prompt"]))
    nxt = torch.zeros((1, 1), dtype=ids.dtype)
    steps = []
    with torch.inference_mode():
        cache = KVCache()
        shard(ids, cache)
        shard(nxt, cache)
        for _ in range(IN_CONTEXT["steps"]):
            dist.barrier()
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                t0 = time.perf_counter()
                float(shard(nxt, cache)[0, 0, 0])
                wall = time.perf_counter() - t0
            gemm = collections.Counter()
            for e in prof.key_averages(group_by_input_shape=True):
                if e.key == "aten::mm":
                    (_, k), (_, n) = e.input_shapes[0], e.input_shapes[1]
                    gemm[f"{k}x{n}"] += e.self_cpu_time_total / 1e6
            steps.append({"wall_s": wall, "gemm_s": dict(gemm)})
        collectives = _collectives_in_step(shard, ids, nxt, dist, torch)
    dist.destroy_process_group()
    queue.put((rank, {"steps": steps, "collectives": collectives}))


def _collectives_in_step(shard, ids, nxt, dist, torch) -> dict:
    """The all-reduce of one decode row (``batch × hidden`` floats) as the decode step pays
    it and as a back-to-back measurement sees it: the step's own calls timed from inside
    (the model's collectives wrapped), the same call back to back, after a 3 ms sleep (the
    rank idle, as a rank that waits for the other), and after a barrier and a GEMV (both
    ranks arrive together)."""
    import statistics
    import time

    from roofprof.distributed.tp_model import Comm
    from roofprof.models.llama_torch import KVCache

    spent: list[float] = []
    gather = shard.comm.all_gather

    def timed_all_reduce(t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        spent.append(time.perf_counter() - t0)

    shard.comm = Comm(timed_all_reduce, gather)
    in_step, calls, per_call = [], 0, []
    cache = KVCache()
    shard(ids, cache)
    shard(nxt, cache)
    for _ in range(IN_CONTEXT["steps"]):
        spent.clear()
        dist.barrier()
        float(shard(nxt, cache)[0, 0, 0])
        in_step.append(sum(spent))
        per_call.append(list(spent))
        calls = len(spent)
    x = torch.zeros(1, 1, shard.hidden)
    w, v = torch.randn(4096, shard.hidden), torch.randn(1, shard.hidden)
    kinds: dict[str, list[float]] = {"back_to_back": [], "after_3ms_sleep": [], "after_gemv": []}
    for _ in range(20):
        for kind, before in (
            ("back_to_back", lambda: None),
            ("after_3ms_sleep", lambda: time.sleep(0.003)),
            ("after_gemv", lambda: (dist.barrier(), torch.nn.functional.linear(v, w))),
        ):
            before()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            kinds[kind].append(time.perf_counter() - t0)
    return {
        "in_step_total_s": statistics.median(in_step),
        "in_step_calls": calls,
        # each call's median in pass order (embedding, then attention and MLP per layer)
        "in_step_per_call_s": [statistics.median(c) for c in zip(*per_call, strict=True)],
        **{f"{k}_s": statistics.median(v) for k, v in kinds.items()},
    }


def in_context(out: Path, tmp: Path) -> dict:
    """One validation's per-op prediction beside the real decode step's GEMMs in context."""
    import collections
    import socket

    import torch.multiprocessing as mp

    path = tmp / "in_context.json"
    run_once("together", path)
    predicted = json.loads(path.read_text())
    ops = predicted["predictions"]["measured"]["ops"]
    decode = [o for o in ops if o["phase"] == "decode"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank_in_context, args=(r, 2, port, queue)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = dict(queue.get(timeout=600) for _ in procs)
    for p in procs:
        p.join()
    per_rank = {r: got[r]["steps"] for r in got}
    rows = []
    calls = collections.Counter()  # GEMM calls per shape in the step (gate and up share one)
    for o in decode:
        if o["kind"] == "gemm":
            calls[f"{o['k']}x{o['n']}"] += o["count"]
    for o in decode:
        if o["kind"] != "gemm":
            continue
        key = f"{o['k']}x{o['n']}"
        seen = [min(s["gemm_s"].get(key, float("inf")) for s in per_rank[r]) for r in (0, 1)]
        median = [statistics.median(s["gemm_s"].get(key, 0.0) for s in per_rank[r]) for r in (0, 1)]
        rows.append(
            {
                "op": o["name"],
                "shape": key,
                "count": o["count"],
                "predicted_s_per_call": o["seconds_per_call"],
                "in_context_fastest_s": [x / calls[key] for x in seen],
                "in_context_median_s": [x / calls[key] for x in median],
            }
        )
    walls = {r: sorted(s["wall_s"] for s in per_rank[r]) for r in (0, 1)}
    return {
        "predicted_decode_s": next(
            r["decode_step_s"] for r in predicted["comparison"] if r["estimator"] == "measured"
        ),
        "predicted_by_kind_s": {
            kind: sum(o["seconds"] for o in decode if o["kind"] == kind)
            for kind in sorted({o["kind"] for o in decode})
        },
        "real_decode_s": predicted["real"]["decode_s"],
        "gemms": rows,
        "profiled_step_walls_s": walls,
        "all_reduce": {r: got[r]["collectives"] for r in (0, 1)},
        "predicted_collectives_s": {
            o["name"]: o["seconds_per_call"] for o in decode if o["kind"] == "communication"
        },
        "real_ttft_s": predicted["real"]["prefill_s"],
        "comparison": predicted["comparison"],
        "profiled_step_gemm_total_s": {
            r: statistics.median(sum(s["gemm_s"].values()) for s in per_rank[r]) for r in (0, 1)
        },
    }


def summarise(rounds: list[dict]) -> dict:
    """Per pricing: the median residual of TTFT and decode over the rounds, and their
    spread (lowest and highest)."""
    series = {p: [r[p] for r in rounds] for p in ("together", "alone")}
    for key in ALSO:  # the together runs' other pricings, where the runs had them
        runs = [r["together"][key] for r in rounds if r["together"].get(key)]
        if runs:
            series[f"together, {key.replace('_', ' ')}"] = runs
    return {
        p: {
            **{k: statistics.median(r[f"{k}_residual"] for r in runs) for k in TARGET},
            **{
                f"{k}_spread": [
                    min(r[f"{k}_residual"] for r in runs),
                    max(r[f"{k}_residual"] for r in runs),
                ]
                for k in TARGET
            },
        }
        for p, runs in series.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="tp_validate_cpu.json")
    ap.add_argument("--max-wait", type=float, default=60.0, help="seconds to wait for quiet")
    ap.add_argument("--in-context", action="store_true", help="the real step's ops in context")
    args = ap.parse_args(argv)
    if args.in_context:
        with tempfile.TemporaryDirectory() as tmp:
            wait_quiet("in context", args.max_wait)
            found = in_context(Path(args.out), Path(tmp))
        found["date"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        found["machine"] = {**lscpu(), "python": platform.python_version()}
        found["settings"] = {"validate": "roofprof validate " + " ".join(ARGS), **IN_CONTEXT}
        Path(args.out).write_text(json.dumps(found, indent=1))
        for row in found["gemms"]:
            print(
                f"{row['op']:10s} {row['shape']:>11s} x{row['count']}: predicted "
                f"{row['predicted_s_per_call'] * 1e3:.3f} ms, in context (fastest step, "
                "ranks 0/1) "
                + " / ".join(f"{x * 1e3:.3f}" for x in row["in_context_fastest_s"])
                + " ms, median "
                + " / ".join(f"{x * 1e3:.3f}" for x in row["in_context_median_s"])
                + " ms"
            )
        walls = found["profiled_step_walls_s"]
        print(
            f"decode step: predicted {found['predicted_decode_s'] * 1e3:.1f} ms "
            + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in found["predicted_by_kind_s"].items())
            + f"; real (validate) {found['real_decode_s'] * 1e3:.1f} ms; profiled steps "
            + "; ".join(
                f"rank {r}: {min(w) * 1e3:.1f}-{max(w) * 1e3:.1f} ms (median "
                f"{statistics.median(w) * 1e3:.1f}), GEMMs "
                f"{found['profiled_step_gemm_total_s'][r] * 1e3:.1f} ms"
                for r, w in walls.items()
            )
        )
        for r, c in found["all_reduce"].items():
            print(
                f"rank {r} all-reduce of one decode row: in the step "
                f"{c['in_step_total_s'] * 1e3:.2f} ms over {c['in_step_calls']} calls; "
                f"back to back {c['back_to_back_s'] * 1e3:.3f} ms, after a 3 ms sleep "
                f"{c['after_3ms_sleep_s'] * 1e3:.3f} ms, after a barrier and a GEMV "
                f"{c['after_gemv_s'] * 1e3:.3f} ms (predicted per call "
                f"{found['predicted_collectives_s']['attn_allreduce'] * 1e3:.3f} ms)"
            )
            print(
                "  in the step per call (pass order): "
                + ", ".join(f"{x * 1e3:.2f}" for x in c["in_step_per_call_s"])
                + " ms"
            )
        print(
            "predicted per call (decode): "
            + ", ".join(
                f"{k} {v * 1e3:.2f} ms" for k, v in found["predicted_collectives_s"].items()
            )
        )
        for row in found["comparison"]:
            if row["estimator"] != "real":
                print(
                    f"{row['estimator']}: TTFT {row['ttft_residual']:+.1%}, "
                    f"decode {row['decode_residual']:+.1%}"
                )
        print(f"written to {args.out}")
        return 0
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = ("together", "alone") if i % 2 == 0 else ("alone", "together")
            row = {}
            for profile in order:
                wait_quiet(f"{profile} {i + 1}", args.max_wait)
                row[profile] = run_once(profile, Path(tmp) / f"{profile}{i}.json")
            rounds.append(row)
            print(
                f"round {i + 1}: "
                + "; ".join(
                    f"{p}: TTFT {row[p]['ttft_residual']:+.1%}, decode "
                    f"{row[p]['decode_residual']:+.1%} (real {row[p]['real_ttft_s'] * 1e3:.0f} / "
                    f"{row[p]['real_decode_s'] * 1e3:.0f} ms)"
                    for p in ("together", "alone")
                )
                + "".join(
                    f"; together, {key.replace('_', ' ')}: TTFT "
                    f"{row['together'][key]['ttft_residual']:+.1%}, decode "
                    f"{row['together'][key]['decode_residual']:+.1%}"
                    for key in ALSO
                    if row["together"].get(key)
                ),
                flush=True,
            )
    summary = summarise(rounds)
    met = all(abs(summary["together"][k]) <= TARGET[k] for k in TARGET)
    payload = {
        "benchmark": "roofprof validate --tp 2 on a CPU: ranks profiled together vs alone",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {**lscpu(), "python": platform.python_version()},
        "command": "roofprof validate " + " ".join(ARGS) + " --rank-profile together|alone",
        "target": TARGET,
        "rounds": rounds,
        "median_residuals": summary,
        "target_met_together": met,
        "quiet_log": QUIET_LOG,
    }
    Path(args.out).write_text(json.dumps(payload, indent=1))
    for p, s in summary.items():
        print(
            f"{p}: median TTFT residual {s['ttft']:+.1%} ({s['ttft_spread'][0]:+.1%} to "
            f"{s['ttft_spread'][1]:+.1%}), decode {s['decode']:+.1%} "
            f"({s['decode_spread'][0]:+.1%} to {s['decode_spread'][1]:+.1%})"
        )
    print("target (together: TTFT ±15 %, decode ±10 %):", "met" if met else "not met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
