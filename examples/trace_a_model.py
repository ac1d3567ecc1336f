"""Put your own PyTorch model on the roofline: ``with roofprof.trace() as t:``.

A small transformer encoder (causal scaled-dot-product attention, GELU MLP, LayerNorm) runs
one warm-up step and two measured steps under ``roofprof.trace``. Every aten op is recorded
with its shapes and module, costed (FLOPs, minimum bytes), timed in context, replayed in
isolation and placed on this machine's measured roofline (cached, or measured quickly the
first time). Prints the slowest ops, the modules and the summary (coverage, MFU/MBU), and
writes trace.json, ops.csv, modules.csv, roofline.png and report.html to ``--out``.

    python examples/trace_a_model.py --device cpu --out examples-out/trace
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _common import device, parse

import roofprof


class Block(torch.nn.Module):
    def __init__(self, d: int = 256, heads: int = 8):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    dev = device(args.device)
    torch_device = dev.info.torch_device
    model = torch.nn.Sequential(*[Block() for _ in range(2)]).eval().to(torch_device)
    x = torch.randn(4, 128, 256, device=torch_device)
    with (
        torch.no_grad(),
        roofprof.trace(device=dev, roofline=args.roofline or "auto", warmup=1) as t,
    ):
        for _ in range(3):  # step 0 warms up, steps 1 and 2 are measured
            model(x)
            t.step()
    result = t.result
    print(result.table(top=12))
    attention = [o for o in result.ops if o.kind == "attention"]
    for o in attention:
        print(
            f"attention {o.op}: {o.flops / 1e6:.1f} MFLOP per call ({o.note}), "
            f"{o.bytes / 1e6:.2f} MB minimum (Q, K, V, O: never the 128x128 scores)"
        )
    written = result.save(args.out)
    print(f"wrote {', '.join(sorted(written))} to {args.out}")


if __name__ == "__main__":
    main()
