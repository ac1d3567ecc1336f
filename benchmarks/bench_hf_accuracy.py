"""Benchmark: `measured` predictions against transformers' own model, in interleaved rounds.

Targets (see BENCHMARKS.md): on a CPU, against each shipped dense family's transformers class
(``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``,
``Phi3ForCausalLM``, ``Gemma3ForCausalLM``, ``Gemma2ForCausalLM``), fp32, batch 1: decode
within ±10 % and prefill within ±15 % of the real run, as the median over interleaved rounds.

Each round visits every family once (family A, B, C, D, then A, B, ... again), and each visit
is a whole ``roofprof validate --backend hf --estimators measured`` in its own process with a
fresh measurement cache: the profile and the real run of one family are measured a few
seconds apart, and a slow spell of the machine touches one round of every family rather than
every round of one. Reported per family: the median residual, its range over the rounds, the
real run's own spread (IQR / median of its samples), the host's drift (a reference matmul
timed before and after the real run and after the profile), how many rounds' residuals lay
within the host's own noise, the framework overhead the prediction counted, the share of the
CPUs other processes used, and the load average before and after.

``--attribute`` also splits the real forward pass by torch.profiler (one process per family,
the same threads): time in the aten ops the op list counts (matmuls, the elementwise ops,
attention) and time outside them (views, dtype casts, Python and module calls), the part the
op list does not cost.

    python benchmarks/bench_hf_accuracy.py --rounds 3 --out /tmp/bench-hf.json
    python benchmarks/bench_hf_accuracy.py --families llama --rounds 1 --attribute
    python benchmarks/bench_hf_accuracy.py --families llama,gemma2 --census
    python benchmarks/bench_hf_accuracy.py --families llama --threads 2 --split
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: small configs of each dense family (about 200 M parameters, unseen by the catalogue)
CONFIGS = {
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "rope_theta": 500000.0,
    },
    "mistral": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "rope_theta": 1000000.0,
        "sliding_window": None,
    },
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "rope_theta": 1000000.0,
        "use_sliding_window": False,
    },
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "rope_theta": 1000000.0,
        "use_sliding_window": False,
        "sliding_window": None,
    },
    "phi3": {
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "rope_theta": 10000.0,
        "sliding_window": None,
        "original_max_position_embeddings": 4096,
    },
    "gemma3": {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": 64,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "rope_local_base_freq": 10000.0,
        "rope_theta": 1000000.0,
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
        "tie_word_embeddings": True,
    },
    "gemma2": {
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": 64,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "sliding_window": 4096,
        "tie_word_embeddings": True,
    },
}
BASE = {
    "hidden_act": "silu",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 6,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}

#: aten ops that carry the counted work (GEMMs, norms, RoPE, SwiGLU, residuals, attention)
COUNTED = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::mul",
    "aten::add",
    "aten::pow",
    "aten::mean",
    "aten::rsqrt",
    "aten::silu",
    "aten::gelu",
    "aten::tanh",
    "aten::div",
    "aten::neg",
    "aten::cat",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_softmax",
    "aten::index_select",
    "aten::embedding",
}


def write_config(folder: Path, family: str) -> Path:
    path = folder / f"{family}-bench.json"
    path.write_text(json.dumps({**BASE, **CONFIGS[family]}))
    return path


def validate_once(config: Path, args, cache: Path) -> dict:
    out = cache / "v.json"
    cmd = [
        sys.executable,
        "-m",
        "roofprof",
        "validate",
        "--model",
        str(config),
        "--device",
        "cpu",
        "--backend",
        "hf",
        "--estimators",
        "measured",
        "--prompt",
        str(args.prompt),
        "--steps",
        str(args.steps),
        "--format",
        "json",
        "--out",
        str(out),
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "ROOFPROF_CACHE": str(cache)}
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or ["failed"]}
    d = json.loads(out.read_text())
    row = next(r for r in d["comparison"] if r["estimator"] == "measured")
    real = d["real"]
    shares = d["telemetry"].get("other_cpu_share", {})
    return {
        "start_utc": time.strftime("%H:%M:%S", time.gmtime()),
        "wall_s": time.perf_counter() - t0,
        "load_start": load0,
        "load_end": os.getloadavg()[0],
        "real_prefill_s": real["prefill_s"],
        "real_decode_s": real["decode_s"],
        "real_prefill_rel_spread": real["prefill_spread_s"] / real["prefill_s"],
        "real_decode_rel_spread": real["decode_spread_s"] / real["decode_s"],
        "real_prefill_page_faults": real.get("prefill_page_faults"),
        "profile_fresh_page_bytes": profile_fresh_bytes(config, args.prompt),
        "predicted_prefill_s": row["ttft_s"],
        "predicted_decode_s": row["decode_step_s"],
        "prefill_residual": row["ttft_residual"],
        "decode_residual": row["decode_residual"],
        "other_cpu_share_max": max([x for v in shares.values() for x in v] or [0.0]),
        "prefill_within_noise": row.get("ttft_within_noise"),
        "decode_within_noise": row.get("decode_within_noise"),
        "prefill_noise_band": row.get("prefill_noise_band"),
        "decode_noise_band": row.get("decode_noise_band"),
        "host_drift": (d.get("host_noise") or {}).get("drift"),
        "framework_overhead": d.get("framework_overhead"),
        "real_model": d.get("real_model"),
        "warnings": d.get("warnings", []),
    }


def attribute(config: str, threads: int | None, prompt: int) -> dict:
    """Split the real forward pass (min of 3 profiled passes) into counted aten ops and the rest."""
    import collections

    import torch
    from torch.profiler import ProfilerActivity, profile

    from roofprof.specs import load_model
    from roofprof.validation.real_model import Runner, build_hf_model

    if threads:
        torch.set_num_threads(threads)
    spec = load_model(config)
    runner = Runner(build_hf_model(spec, "fp32", "cpu", "fused"), "hf")
    ids = torch.randint(0, spec.vocab_size, (1, prompt))
    out = {}
    with torch.inference_mode():
        _, cache = runner.prefill(ids)
        nxt = torch.tensor([[1]])
        runner.step(nxt, cache)
        for phase in ("prefill", "decode"):
            best = None
            for _ in range(3):
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    t0 = time.perf_counter()
                    if phase == "prefill":
                        runner.prefill(ids)
                    else:
                        runner.step(nxt, cache)
                    wall = time.perf_counter() - t0
                if best is None or wall < best[0]:
                    by = collections.Counter()
                    calls = 0
                    for e in prof.key_averages():
                        by[e.key] += e.self_cpu_time_total / 1e6
                        calls += e.count
                    best = (wall, by, calls)
            wall, by, calls = best
            counted = sum(v for k, v in by.items() if k in COUNTED)
            out[phase] = {
                "wall_s": wall,
                "counted_aten_s": counted,
                "gemm_s": by["aten::mm"] + by["aten::addmm"] + by["aten::bmm"],
                "other_aten_s": sum(by.values()) - counted,
                "outside_aten_s": wall - sum(by.values()),
                "aten_calls": calls,
            }
    return out


def census(config: str, prompt: int) -> dict:
    """The aten calls (name, input shapes; views left out) of one real prefill and one decode
    step that the op list's calls do not make, and the reverse. No timing: deterministic."""
    import collections

    import numpy as np
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from roofprof.models import ops as model_ops
    from roofprof.profiling.torch_ops import TorchOps
    from roofprof.specs import load_model
    from roofprof.validation.real_model import Runner, build_hf_model
    from roofprof.workload import Scenario

    views = {"view", "_unsafe_view", "transpose", "t", "slice", "expand", "unsqueeze", "reshape"}
    views |= {"select", "alias", "detach", "as_strided", "squeeze", "permute", "split", "narrow"}

    def squeeze(shape):
        while len(shape) > 1 and shape[0] == 1:
            shape = shape[1:]
        return shape

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket.__name__)
            if name not in views:  # shapes without leading 1s (the op list has no batch dim)
                shapes = tuple(squeeze(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor))
                self.calls[(name, shapes)] += 1
            return func(*args, **(kwargs or {}))

    spec = load_model(config)
    runner = Runner(build_hf_model(spec, "fp32", "cpu", "fused"), "hf")
    impl = TorchOps(spec, "cpu")
    ids = torch.randint(0, spec.vocab_size, (1, prompt))
    out = {}
    with torch.inference_mode():
        for phase in ("prefill", "decode"):
            _, cache = runner.prefill(ids)
            with Log() as real:
                runner.prefill(ids) if phase == "prefill" else runner.step(ids[:, :1], cache)
            listed = collections.Counter()
            scenario = Scenario.of(spec, phase, prompt_tokens=prompt, dtype="fp32")
            for op in model_ops(scenario).ops:
                prepared = impl.prepare(op, np.random.default_rng(0))
                with Log() as one:
                    prepared.run()
                for key, n in one.calls.items():
                    listed[key] += n * op.count
                prepared.release()
            out[phase] = {
                "real_calls": sum(real.calls.values()),
                "op_list_calls": sum(listed.values()),
                "only_in_real": [
                    f"{n}x {k[0]}{list(k[1])}" for k, n in (real.calls - listed).items()
                ],
                "only_in_op_list": [
                    f"{n}x {k[0]}{list(k[1])}" for k, n in (listed - real.calls).items()
                ],
            }
    return out


def split(config: str, threads: int | None, prompt: int, passes: int = 8) -> dict:
    """The real prefill's aten ops in context (torch.profiler, the fastest of ``passes`` per
    op and shapes) beside the op list's ops timed alone as the profiler does (the fastest of
    their calls), in one process: ratios robust to a slow spell that a single timing is not."""
    import collections

    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    from roofprof.models import ops as model_ops
    from roofprof.profiling.torch_ops import TorchOps
    from roofprof.specs import load_model
    from roofprof.validation.real_model import Runner, build_hf_model
    from roofprof.workload import Scenario

    if threads:
        torch.set_num_threads(threads)
    spec = load_model(config)
    runner = Runner(build_hf_model(spec, "fp32", "cpu", "fused"), "hf")
    ids = torch.randint(0, spec.vocab_size, (1, prompt))
    fastest: dict[str, float] = collections.defaultdict(lambda: float("inf"))
    with torch.inference_mode():
        runner.prefill(ids)
        for _ in range(passes):
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                t0 = time.perf_counter()
                runner.prefill(ids)
                wall = time.perf_counter() - t0
            fastest["wall"] = min(fastest["wall"], wall)
            for e in prof.key_averages(group_by_input_shape=True):
                key = f"{e.key} {e.input_shapes}"
                fastest[key] = min(fastest[key], e.self_cpu_time_total / 1e6)
        impl = TorchOps(spec, "cpu")
        alone = {}
        for op in model_ops(Scenario.of(spec, "prefill", prompt_tokens=prompt, dtype="fp32")).ops:
            prepared = impl.prepare(op, np.random.default_rng(0))
            calls = prepared.calls
            times = []
            for i in range(max(12, 3 * len(calls))):
                if prepared.before_call is not None:
                    prepared.before_call()
                t0 = time.perf_counter()
                calls[i % len(calls)]()
                times.append(time.perf_counter() - t0)
            alone[op.name] = {"per_call_s": min(times[len(calls) :]), "count": op.count}
            prepared.release()
    in_context = dict(sorted(fastest.items(), key=lambda kv: -kv[1])[:30])
    total = sum(v["per_call_s"] * v["count"] for v in alone.values())
    return {
        "real_wall_s": fastest["wall"],
        "in_context": in_context,
        "alone": alone,
        "alone_total_s": total,
    }


def profile_fresh_bytes(config: Path, prompt: int) -> int:
    """Bytes of non-GEMM outputs the CPU profile of the prefill times in fresh pages."""
    from roofprof.models import ops
    from roofprof.profiling.torch_ops import fresh_page_bytes
    from roofprof.workload import Scenario

    scenario = Scenario.of(str(config), "prefill", prompt_tokens=prompt, dtype="fp32")
    return fresh_page_bytes(ops(scenario).ops, 4)


def summarise(rounds: list[dict]) -> dict:
    ok = [r for r in rounds if "error" not in r]
    if not ok:
        return {"rounds": len(rounds), "ok": 0}
    s: dict = {"rounds": len(rounds), "ok": len(ok)}
    for key in ("prefill_residual", "decode_residual", "real_prefill_s", "real_decode_s"):
        vals = [r[key] for r in ok]
        s[key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    for key in ("real_prefill_rel_spread", "real_decode_rel_spread", "other_cpu_share_max"):
        s[key] = statistics.median(r[key] for r in ok)
    faults = [
        r["real_prefill_page_faults"] for r in ok if r.get("real_prefill_page_faults") is not None
    ]
    s["real_prefill_page_faults"] = (
        {"median": statistics.median(faults), "min": min(faults), "max": max(faults)}
        if faults
        else None
    )
    drifts = [r["host_drift"] for r in ok if r.get("host_drift") is not None]
    s["host_drift"] = statistics.median(drifts) if drifts else None
    for phase in ("prefill", "decode"):
        vals = [r[f"{phase}_residual"] for r in ok]
        s[f"{phase}_residual"]["spread"] = max(vals) - min(vals)
        s[f"{phase}_rounds_within_noise"] = sum(1 for r in ok if r.get(f"{phase}_within_noise"))
    s["prefill_target_met"] = abs(s["prefill_residual"]["median"]) <= 0.15
    s["decode_target_met"] = abs(s["decode_residual"]["median"]) <= 0.10
    return s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(CONFIGS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--attribute", action="store_true")
    parser.add_argument("--census", action="store_true")
    parser.add_argument("--split", action="store_true")
    parser.add_argument("--attribute-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="bench-hf-accuracy.json")
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    bad = [f for f in families if f not in CONFIGS]
    if bad:
        print(f"unknown family {bad[0]!r}; valid choices: {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        configs = {f: write_config(folder, f) for f in families}
        if args.attribute_only:
            print(json.dumps(attribute(str(configs[families[0]]), args.threads, args.prompt)))
            return 0
        if args.split:
            for f in families:
                x = split(str(configs[f]), args.threads, args.prompt)
                print(
                    f"{f} prefill: real pass {x['real_wall_s'] * 1e3:.1f} ms (profiled, fastest), "
                    f"op list timed alone {x['alone_total_s'] * 1e3:.1f} ms"
                )
                for name, v in x["alone"].items():
                    print(f"  alone {name:14s} {v['count']:2d} x {v['per_call_s'] * 1e3:8.3f} ms")
                for key, sec in x["in_context"].items():
                    print(f"  in context {sec * 1e3:8.3f} ms  {key[:100]}")
            return 0
        if args.census:
            for f in families:
                found = census(str(configs[f]), args.prompt)
                for phase, c in found.items():
                    print(
                        f"{f} {phase}: {c['real_calls']} aten calls in the real pass, "
                        f"{c['op_list_calls']} in the op list's calls"
                    )
                    for line in c["only_in_real"]:
                        print(f"  only in the real pass: {line}")
                    for line in c["only_in_op_list"]:
                        print(f"  only in the op list:   {line}")
            return 0
        rounds: dict[str, list[dict]] = {f: [] for f in families}
        for r in range(args.rounds):
            for f in families:
                with tempfile.TemporaryDirectory(dir=tmp) as cache:
                    row = validate_once(configs[f], args, Path(cache))
                rounds[f].append(row)
                print(
                    f"round {r + 1} {f}: "
                    + (
                        f"prefill {row['prefill_residual']:+.1%} "
                        f"decode {row['decode_residual']:+.1%}"
                        f" (real {row['real_prefill_s'] * 1e3:.0f} ms / "
                        f"{row['real_decode_s'] * 1e3:.1f} ms, others up to "
                        f"{row['other_cpu_share_max']:.0%})"
                        if "error" not in row
                        else f"failed: {row['error']}"
                    ),
                    flush=True,
                )
        attribution = {}
        if args.attribute:
            for f in families:
                cmd = [sys.executable, __file__, "--attribute-only", "--families", f]
                cmd += ["--prompt", str(args.prompt)]
                if args.threads:
                    cmd += ["--threads", str(args.threads)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
                attribution[f] = json.loads(lines[-1]) if lines else {"error": proc.stderr[-300:]}
    result = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
        "cpus": os.cpu_count(),
        "settings": vars(args),
        "summary": {f: summarise(rows) for f, rows in rounds.items()},
        "rounds": rounds,
        "attribution": attribution,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    for f, s in result["summary"].items():
        if s.get("ok"):
            p, d = s["prefill_residual"], s["decode_residual"]
            drift = s.get("host_drift")
            print(
                f"{f}: prefill median {p['median']:+.1%} [{p['min']:+.1%}, {p['max']:+.1%}] "
                f"{'met' if s['prefill_target_met'] else 'NOT met'}; decode median "
                f"{d['median']:+.1%} [{d['min']:+.1%}, {d['max']:+.1%}] "
                f"{'met' if s['decode_target_met'] else 'NOT met'}; real spread "
                f"{s['real_prefill_rel_spread']:.1%} / {s['real_decode_rel_spread']:.1%}, host "
                f"drift {'n/a' if drift is None else f'{drift:.1%}'}, rounds within the host's "
                f"noise {s['prefill_rounds_within_noise']}/{s['ok']} prefill, "
                f"{s['decode_rounds_within_noise']}/{s['ok']} decode"
                + (
                    f"; real prefill first-touched {pf['min']:,.0f}-{pf['max']:,.0f} pages"
                    if (pf := s.get("real_prefill_page_faults"))
                    else ""
                )
            )
    for f, a in attribution.items():
        for phase, x in a.items():
            if isinstance(x, dict):
                print(
                    f"{f} {phase}: wall {x['wall_s'] * 1e3:.1f} ms = counted aten "
                    f"{x['counted_aten_s'] * 1e3:.1f} (GEMM {x['gemm_s'] * 1e3:.1f}) + other aten "
                    f"{x['other_aten_s'] * 1e3:.1f} + outside aten {x['outside_aten_s'] * 1e3:.1f}"
                    f" ({x['aten_calls']} aten calls)"
                )
    print(f"written to {args.out}")
    print(
        "final figures (a quiet machine, nothing else running):\n"
        "  python benchmarks/bench_hf_accuracy.py --rounds 3 --out bench-hf-accuracy.json"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
