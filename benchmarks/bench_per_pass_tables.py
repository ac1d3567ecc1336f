"""Benchmark: what transformers' models spend once per pass on RoPE tables and attention masks.

The op list costs the layers' work; the real model also builds, once per forward pass, its
rotary tables (cos and sin for every position: the ``*RotaryEmbedding`` modules) and its
attention masks (``create_causal_mask``, ``create_sliding_window_causal_mask``: none or a
small one on the SDPA path, a dense ``prompt × context`` float mask on the eager path, which
Gemma 2 takes for its soft-capped scores). The prediction counts these only through the
framework overhead's per-pass term, measured at 8 tokens. This benchmark times them inside
real prefills at growing prompts: every such module's forward and every mask function of the
model's own modelling module are wrapped with a clock, and the time they took is set beside
the forward's wall (median of ``--repeats`` forwards, fp32, batch 1, ``inference_mode``).

The models are the ~200 M-parameter configs of ``bench_hf_accuracy.py`` (6 layers, hidden
1024), with random weights, built as ``roofprof validate --backend hf`` builds them.

    python benchmarks/bench_per_pass_tables.py [--families llama,gemma2] [--prompts 128,2048]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_cpu_roofline import lscpu, wait_quiet  # noqa: E402
from bench_hf_accuracy import CONFIGS, write_config  # noqa: E402


def _wrap(owner, name: str, spent: list[float]) -> None:
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t0)

    setattr(owner, name, timed)


def per_pass(family: str, prompts: list[int], repeats: int, folder: Path) -> list[dict]:
    """Each prompt's forward wall and the time in its tables and masks (medians)."""
    import importlib

    import torch

    from roofprof.specs import load_model
    from roofprof.validation.real_model import build_hf_model

    spec = load_model(str(write_config(folder, family)))
    model = build_hf_model(spec, "fp32", "cpu", "fused")
    tables: list[float] = []
    masks: list[float] = []
    for module in model.modules():
        if type(module).__name__.endswith("RotaryEmbedding"):
            _wrap(module, "forward", tables)
    modelling = importlib.import_module(type(model.model).__module__)
    wrapped = [n for n in dir(modelling) if n.startswith("create_") and "mask" in n]
    for name in wrapped:
        _wrap(modelling, name, masks)
    rows = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.randint(0, spec.vocab_size, (1, prompt))
            model(ids)  # warm-up
            walls, in_tables, in_masks = [], [], []
            for _ in range(repeats):
                tables.clear()
                masks.clear()
                t0 = time.perf_counter()
                model(ids)
                walls.append(time.perf_counter() - t0)
                in_tables.append(sum(tables))
                in_masks.append(sum(masks))
            wall, t, m = (statistics.median(x) for x in (walls, in_tables, in_masks))
            rows.append(
                {
                    "family": family,
                    "attention": model.config._attn_implementation,
                    "prompt": prompt,
                    "forward_s": wall,
                    "rope_tables_s": t,
                    "masks_s": m,
                    "share": (t + m) / wall,
                    "mask_functions": wrapped,
                }
            )
            print(
                f"{family:8s} ({rows[-1]['attention']}) prompt {prompt:5d}: forward "
                f"{wall * 1e3:8.1f} ms, RoPE tables {t * 1e3:6.3f} ms, masks {m * 1e3:6.3f} ms "
                f"({rows[-1]['share']:.3%} of the forward)",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="llama,qwen3,gemma3,gemma2")
    ap.add_argument("--prompts", default="128,512,2048")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="per_pass_tables_cpu.json")
    ap.add_argument("--max-wait", type=float, default=60.0, help="seconds to wait for quiet")
    args = ap.parse_args(argv)
    families = args.families.split(",")
    bad = [f for f in families if f not in CONFIGS]
    if bad:
        ap.error(f"unknown family {bad[0]!r}; valid choices: {', '.join(CONFIGS)}")
    prompts = [int(p) for p in args.prompts.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in families:
            wait_quiet(family, args.max_wait)
            rows += per_pass(family, prompts, args.repeats, Path(tmp))
    import torch
    import transformers

    payload = {
        "benchmark": "RoPE tables and attention masks per pass in transformers' models",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {**lscpu(), "python": platform.python_version()},
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "command": "python benchmarks/bench_per_pass_tables.py " + " ".join(argv or sys.argv[1:]),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(payload, indent=1))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
