"""Benchmark ``roofprof.trace`` on the CPU against FlopCounterMode and an uninstrumented run.

Targets, for models no one tuned to (a small CNN, an MLP, a transformer encoder
with causal SDPA), inference, fp32:

* the traced matmul and convolution FLOPs equal ``FlopCounterMode``'s (same forward pass);
* attention FLOPs follow the causal mask (``4·b·h·pairs·d`` with ``pairs = s(s+1)/2``;
  FlopCounterMode counts CPU SDPA as 0);
* coverage >= 95 % of the window's op time (ops with a FLOP formula and a byte model);
* the sum of in-context op times per step within 15 % of the uninstrumented wall time of the
  same step (median of steps, measured separately in the same process, same threads);
* a 10,000-op window traced, replayed and reported in under 60 s.

Usage::

    python benchmarks/bench_trace.py [--threads 1] [--steps 5] [--out results.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

import roofprof


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layers, c = [], 3
        for width in (32, 64, 128):
            layers += [
                torch.nn.Conv2d(c, width, 3, padding=1),
                torch.nn.BatchNorm2d(width),
                torch.nn.ReLU(),
                torch.nn.MaxPool2d(2),
            ]
            c = width
        self.features = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(128 * 8 * 8, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class MLP(torch.nn.Module):
    def __init__(self, width=1024, depth=4):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        for layer in self.layers:
            x = F.gelu(layer(x))
        return self.norm(x).softmax(-1)


class Block(torch.nn.Module):
    def __init__(self, d=256, heads=8):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (
            self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Encoder(torch.nn.Module):
    def __init__(self, layers=4, d=256, heads=8):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return x


MODELS = {
    "cnn": (CNN, (16, 3, 64, 64), None),
    "mlp": (MLP, (256, 1024), None),
    "encoder": (Encoder, (8, 256, 256), dict(layers=4, heads=8, seq=256, d=256, batch=8)),
}


def flopcounter(model, x) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as f:
        model(x)
    return f.get_total_flops()


def wall_per_step(model, x, steps: int) -> float:
    with torch.no_grad():
        model(x)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_model(name: str, steps: int, rounds: int) -> dict:
    cls, shape, attn = MODELS[name]
    torch.manual_seed(0)
    model, x = cls().eval(), torch.randn(*shape)
    ref_flops = flopcounter(model, x)
    ratios, walls, op_times = [], [], []
    for _ in range(rounds):  # interleaved: a shared host's load moves between measurements
        uninstrumented = wall_per_step(model, x, steps)
        t0 = time.perf_counter()
        with torch.no_grad(), roofprof.trace(device="cpu", warmup=1, steps=steps) as t:
            for _ in range(steps + 1):
                model(x)
                t.step()
        r = t.result
        traced_s = time.perf_counter() - t0
        walls.append(uninstrumented)
        op_times.append(r.summary.op_time_s / steps)
        ratios.append(op_times[-1] / uninstrumented - 1)
    mm_conv = sum(o.flops * o.count for o in r.ops if o.kind in ("matmul", "conv")) / steps
    attention = sum(o.flops * o.count for o in r.ops if o.kind == "attention") / steps
    expected_attention = None
    if attn:
        s = attn["seq"]
        expected_attention = (
            4
            * attn["batch"]
            * attn["heads"]
            * (s * (s + 1) // 2)
            * (attn["d"] // attn["heads"])
            * attn["layers"]
        )
    op_time_step = statistics.median(op_times)
    uninstrumented = statistics.median(walls)
    row = {
        "model": name,
        "input": list(shape),
        "steps": steps,
        "flopcounter_flops": ref_flops,
        "traced_matmul_conv_flops": mm_conv,
        "flops_equal": mm_conv == ref_flops,
        "traced_attention_flops": attention,
        "expected_causal_attention_flops": expected_attention,
        "coverage": r.summary.coverage,
        "uninstrumented_wall_per_step_s": uninstrumented,
        "op_time_per_step_s": op_time_step,
        "op_time_vs_wall": statistics.median(ratios),
        "op_time_vs_wall_rounds": ratios,
        "traced_wall_per_step_s": r.summary.wall_s / steps,
        "trace_replay_report_s": traced_s,
        "op_calls_per_step": r.summary.calls / steps,
        "unique_ops": r.summary.unique_ops,
        "mfu_measured": r.summary.mfu_measured,
        "mbu_measured": r.summary.mbu_measured,
        "roofline": r.summary.roofline_source,
    }
    print(
        f"{name}: FLOPs {mm_conv:.4g} vs FlopCounterMode {ref_flops:.4g} "
        f"(equal: {row['flops_equal']}); "
        f"attention {attention:.4g} (expected {expected_attention}); "
        f"coverage {100 * r.summary.coverage:.1f}%; "
        f"op time/step {op_time_step * 1e3:.2f} ms "
        f"vs uninstrumented wall {uninstrumented * 1e3:.2f} ms "
        f"(median of rounds {100 * row['op_time_vs_wall']:+.1f}%: "
        f"{', '.join(f'{100 * q:+.1f}%' for q in ratios)}); "
        f"traced+replayed+reported in {traced_s:.1f} s"
    )
    return row


def bench_10k() -> dict:
    """50 layers of 50 different widths (150 unique signatures), run until 10,000 op calls."""
    widths = [32 + 8 * i for i in range(51)]
    model = torch.nn.Sequential(
        *[
            torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.ReLU())
            for a, b in zip(widths, widths[1:], strict=False)
        ]
    )
    x = torch.randn(8, widths[0])
    t0 = time.perf_counter()
    with torch.no_grad(), roofprof.trace(device="cpu") as t:
        while t.calls < 10_000:
            model(x)
    text = t.result.table()
    elapsed = time.perf_counter() - t0
    print(
        f"10k-op window: {t.calls} op calls, {len(t.result.ops)} unique, "
        f"traced+replayed+reported in {elapsed:.1f} s"
    )
    return {
        "op_calls": t.calls,
        "unique_ops": len(t.result.ops),
        "seconds": elapsed,
        "table_lines": len(text.splitlines()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = [bench_model(name, args.steps, args.rounds) for name in MODELS]
    big = bench_10k()
    payload = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "threads": args.threads,
        "rounds": args.rounds,
        "torch": torch.__version__,
        "load_average": os.getloadavg(),
        "models": rows,
        "window_10k": big,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(payload, f, indent=1)


if __name__ == "__main__":
    main()
