"""Validate a datasheet against measurements: ceilings, then predictions against a real run.

The third job roofprof exists for. Three views of the same machine, side by side:

* ``spec``: the datasheet's ceilings (``data/gpus.json``, each figure with its source);
* ``empirical``: the ceilings measured by the peak probes;
* ``measured``: every op of the Llama pass timed on this device (checked first), summed;

and the ``real`` run: a Llama forward pass (prefill, then decode steps) timed on the same
device. Each ceiling is printed as measured/datasheet, and each prediction with its
residual (``predicted / real - 1``) for time to first token and the decode step::

    python examples/validate_datasheet.py --device cuda:0     # H100, H200, A100, ...
    python examples/validate_datasheet.py --device cpu

CPUs have no datasheet row (the database lists GPUs), so on a CPU the ``spec`` column is
absent and the example validates the roofline model itself (empirical and measured against
the real run). The real run uses random weights and, on a CPU, 4 of the model's layers
(the predictions are made for exactly what ran). About a minute on a CPU.
"""

from __future__ import annotations

from _common import device, parse, roofline_of, si

import roofprof
from roofprof.prediction.rollup import RooflineEstimator
from roofprof.profiling.measured import measured_estimator
from roofprof.roofline import Roofline
from roofprof.specs import load_gpu


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    dev = device(args.device)
    info = dev.info
    measured = roofline_of(dev, args.roofline)
    spec = Roofline.from_spec(load_gpu(info.spec_id)) if info.spec_id else None

    # 1. Ceilings: measured against the datasheet.
    if spec is None:
        print(
            f"{info.name}: no datasheet row in data/gpus.json; comparing the roofline model "
            "with measurements only"
        )
    else:
        print(f"{'ceiling':<22}{'datasheet':>14}{'measured':>14}{'ratio':>8}")
        for c in spec.ceilings:
            try:
                got = (
                    measured.memory_bandwidth(c.level)
                    if c.kind == "memory"
                    else measured.compute_peak(c.dtype)
                )
            except roofprof.RoofprofError:
                continue  # this ceiling was not probed (e.g. fp8 without a library GEMM)
            unit = "B/s" if c.kind == "memory" else "FLOP/s"
            print(
                f"{c.level or c.dtype:<22}{si(c.value, unit):>14}{si(got, unit):>14}"
                f"{got / c.value:>8.2f}"
            )

    # 2. Predictions against a real run of the same pass.
    model, dtype = info.default_model, info.default_dtype
    estimators = {"empirical": RooflineEstimator(measured, "empirical")}
    if spec is not None:
        estimators = {"spec": RooflineEstimator(spec, "spec"), **estimators}
    estimators["measured"] = measured_estimator(model, dev, dtype, roofline=measured, budget_s=0.05)
    result = roofprof.validate(
        model,
        device=dev,
        dtype=dtype,
        prompt_tokens=128,
        decode_steps=4,
        max_layers=None if info.asynchronous else 4,
        estimators=estimators,
    )
    real = result.real
    print(
        f"\n{model} ({result.model.num_layers} layers) {dtype}, batch {real.batch}, "
        f"{real.prompt_tokens}-token prompt, backend {result.backend}"
    )
    print(f"{'estimator':<12}{'TTFT':>11}{'residual':>10}{'decode step':>13}{'residual':>10}")
    for row in result.comparison():
        tr, dr = row["ttft_residual"], row["decode_residual"]
        print(
            f"{row['estimator']:<12}{si(row['ttft_s'], 's'):>11}{tr:>+10.1%}"
            f"{si(row['decode_step_s'], 's'):>13}{dr:>+10.1%}"
        )
    for warning in result.warnings:
        print(f"warning: {warning}")


if __name__ == "__main__":
    main()
