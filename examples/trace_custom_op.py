"""Give your own op a cost: ``roofprof.trace.register_cost`` for a ``torch.library`` op.

A custom op (``demo::scaled_silu``: ``x * sigmoid(x) * scale``, one fused call) has no
FLOP formula anywhere: torch's FlopCounterMode counts it as 0 and roofprof reports it as
time only ("no-cost"). Registering its cost (4 FLOPs per element; reads x, writes the
output) puts it on the roofline next to the built-in ops.

    python examples/trace_custom_op.py --device cpu
"""

from __future__ import annotations

import torch
from _common import device, parse

import roofprof
from roofprof.tracing import Cost, OpCall, register_cost


@torch.library.custom_op("demo::scaled_silu", mutates_args=())
def scaled_silu(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x * torch.sigmoid(x) * scale


@scaled_silu.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def run(model: torch.nn.Module, x: torch.Tensor, dev, roofline):
    with torch.no_grad(), roofprof.trace(device=dev, roofline=roofline, replay_budget_s=0.01) as t:
        scaled_silu(model(x), 0.5)
    return next(o for o in t.result.ops if o.op == "demo::scaled_silu")


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    dev = device(args.device)
    roofline = args.roofline or "auto"
    model = torch.nn.Linear(512, 512).to(dev.info.torch_device)
    x = torch.randn(256, 512, device=dev.info.torch_device)

    before = run(model, x, dev, roofline)
    print(
        f"before: {before.op} flops={before.flops} bytes={before.bytes} flags={list(before.flags)}"
    )

    @register_cost("demo::scaled_silu")
    def _cost(call: OpCall) -> Cost:
        x = call.tensors[0]  # sigmoid (1), two multiplies (2), the add inside sigmoid (1)
        return Cost(
            flops=4 * x.numel,
            read_bytes=x.nbytes,
            write_bytes=x.nbytes,
            kind="custom",
            note="4 FLOPs/element",
        )

    after = run(model, x, dev, roofline)
    print(
        f"after:  {after.op} flops={after.flops} bytes={after.bytes} "
        f"intensity={after.intensity:.2f} "
        f"time/call={after.time_per_call_s * 1e6:.1f} us "
        f"replay={(after.replay_s or 0) * 1e6:.1f} us "
        f"roof={after.roof} {after.percent_of_roof or 0:.0f}% of roof ({after.bound} bound)"
    )


if __name__ == "__main__":
    main()
