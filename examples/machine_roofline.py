"""Build and plot a machine roofline, then predict a Llama on it.

The second job roofprof exists for. Peak-probe kernels measure the bandwidth of each memory
level (a working-set sweep finds the L1/L2/L3/DRAM plateaus on a CPU, L2 and HBM on a GPU)
and the compute rate per dtype (FMA loops; BLAS/cuBLAS GEMMs). Every probe is checked
against a numpy reference before it is timed. The result is written as ``roofline.json``
(the same file ``roofprof roofline`` writes) and drawn three ways: the roofline, the
bandwidth staircase over working-set sizes, and the intensity sweep. Then the device's
default model is predicted on the measured ceilings (the ``empirical`` estimator)::

    python examples/machine_roofline.py --device cpu --out /tmp/rp

On a GPU with a row in ``data/gpus.json`` the datasheet ceilings are drawn dashed beside
the measured ones. Under a minute on a CPU (the quick plan).
"""

from __future__ import annotations

from pathlib import Path

from _common import device, parse, si

import roofprof
from roofprof.plots.roofline import plot_roofline
from roofprof.plots.sweeps import plot_intensity_sweep, plot_staircase
from roofprof.roofline import Roofline
from roofprof.roofline.probes import measure_roofline
from roofprof.specs import load_gpu


def _progress(done: int, total: int, label: str) -> None:
    if done == total or done % 10 == 0:
        print(f"  [{done}/{total}] {label}")


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    out = Path(args.out)
    dev = device(args.device)
    info = dev.info

    result = measure_roofline(dev, plan="quick", progress=_progress)
    result.write(out / "roofline.json")
    roof = result.roofline
    print(f"\n{'ceiling':<40}{'value':>14}")
    for c in roof.ceilings:
        what = f"{c.name} ({c.kind}, {c.level or c.dtype})"
        print(f"{what:<40}{si(c.value, 'B/s' if c.kind == 'memory' else 'FLOP/s'):>14}")
    for warning in result.warnings:
        print(f"warning: {warning}")

    spec = Roofline.from_spec(load_gpu(info.spec_id)) if info.spec_id else None
    pngs = [
        plot_roofline(roof, (), out / "roofline.png", spec=spec, title=f"{info.name} (measured)"),
        plot_staircase(result, out / "staircase.png"),
        plot_intensity_sweep(result, out / "intensity.png"),
    ]

    dtype = info.default_dtype
    p = roofprof.predict(info.default_model, roofline=roof, prompt_tokens=128, dtype=dtype)
    print(
        f"\n{info.default_model} {dtype} on the measured ceilings: "
        f"TTFT {si(p.prefill.seconds, 's')} "
        f"for 128 tokens ({p.prefill.bound}-bound), decode {p.tokens_per_second:.1f} tokens/s "
        f"({p.decode.bound}-bound)"
    )
    print("wrote " + ", ".join(str(x) for x in (out / "roofline.json", *pngs)))


if __name__ == "__main__":
    main()
