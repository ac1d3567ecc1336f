"""Profile this machine: measure its roofline, time Llama-shaped kernels, place them on it.

The first job roofprof exists for, in the Python API. It measures a quick roofline (memory
bandwidth per cache level, compute per dtype), times every op of one Llama decode step with
the fastest implementation available (numpy/numba/torch on a CPU; CuPy/Numba/cuBLAS/torch on
a GPU), each checked against a reference before it is timed, and places each op on the
roofline: its arithmetic intensity, achieved rate, percent of the attainable roof and bound.

On a CPU this is Llama 3.2 1B in fp32 (about half a minute); on a GPU the device's default
model and dtype (Llama 3.1 8B, bf16)::

    python examples/profile_this_machine.py              # a GPU if there is one, else the CPU
    python examples/profile_this_machine.py --device cpu --out /tmp/rp

Writes ``roofline.png`` (the ops on the measured roofline) to ``--out``. ``--roofline
FILE`` reuses a measured ``roofline.json`` (``machine_roofline.py`` writes one).
"""

from __future__ import annotations

from pathlib import Path

from _common import device, parse, roofline_of, si

import roofprof
from roofprof.plots.roofline import plot_roofline
from roofprof.roofline import Point


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    dev = device(args.device)
    info = dev.info

    # 1. The machine's roofline (the quick plan; `roofprof roofline` runs the full one).
    roof = roofline_of(dev, args.roofline)
    dtype = info.default_dtype
    print(
        f"roofline: DRAM {si(roof.memory_bandwidth('dram'), 'B/s')}, "
        f"{dtype} compute {si(roof.compute_peak(dtype), 'FLOP/s')}, "
        f"ridge {roof.ridge(dtype):.1f} FLOP/B"
    )

    # 2. Every op of one decode step, measured and placed on that roofline.
    result = roofprof.profile(
        info.default_model,
        "decode",
        prompt_tokens=128,
        dtype=dtype,
        device=dev,
        roofline=roof,
        budget_s=0.02,
    )
    print(
        f"\n{info.default_model} decode step at a 128-token context: "
        f"{si(result.seconds, 's')} measured (sum of the ops)"
    )
    print(
        f"{'op':<14}{'impl':<10}{'time/call':>11}{'FLOP/B':>9}{'achieved':>14}{'% roof':>8}  bound"
    )
    points = []
    for op_result in result.ops:
        row = op_result.to_dict()
        if row["seconds_per_call"] is None:
            print(f"{row['name']:<14}(no implementation passed its check)")
            continue
        intensity = row["intensity"]
        achieved = row["flops_per_s"] if row["flops"] else row["bytes_per_s"]
        unit = "FLOP/s" if row["flops"] else "B/s"
        pct = row["percent_of_roof"]
        print(
            f"{row['name']:<14}{row['impl']:<10}{si(row['seconds_per_call'], 's'):>11}"
            f"{intensity if intensity is not None else float('nan'):>9.2f}{si(achieved, unit):>14}"
            f"{(f'{pct:.0f}%' if pct is not None else '-'):>8}  {row['bound'] or '-'}"
        )
        op = op_result.op
        if op.flops > 0 and op.bytes > 0:
            points.append(Point(op.name, op.flops, op.bytes, op_result.seconds, op.dtype))

    # 3. The picture: the measured ceilings with every op where it really ran.
    png = plot_roofline(
        roof,
        points,
        Path(args.out) / "roofline.png",
        dtypes=[dtype],
        title=f"{info.name}: {info.default_model} decode ops",
    )
    print(f"\nwrote {png}")


if __name__ == "__main__":
    main()
