"""Small helpers shared by the examples (argument parsing, a device, printing)."""

from __future__ import annotations

import argparse
from pathlib import Path

from roofprof.devices import select


def parse(description: str) -> argparse.Namespace:
    """``--device`` (auto, cpu, cuda:N) and ``--out`` (a folder for the files an example writes)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--device", default="auto", help="auto (a GPU if there is one), cpu or cuda:N"
    )
    parser.add_argument("--out", default="examples-out", help="folder for the files written")
    parser.add_argument(
        "--roofline",
        default=None,
        help="a roofline.json to reuse (e.g. machine_roofline.py's); default: measure one",
    )
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    return args


def device(label: str):
    """The device to run on; prints which one and why (a GPU when ``auto`` finds one)."""
    dev = select(label)
    info = dev.info
    print(
        f"device: {info.label} ({info.name}, {info.compute_units} {info.compute_unit_name}); "
        f"compute dtype {info.default_dtype}"
    )
    return dev


def roofline_of(dev, path: str | None):
    """The measured roofline: ``path`` when given, else a quick measurement now (seconds)."""
    from roofprof.roofline import load_roofline
    from roofprof.roofline.probes import measure_roofline

    if path:
        print(f"roofline: {path}")
        return load_roofline(path)
    print("measuring a quick roofline of this device ...")
    return measure_roofline(dev, plan="quick").roofline


def si(value: float | None, unit: str) -> str:
    """``1.23e9, "B/s"`` -> ``"1.23 GB/s"`` (``-`` for a missing value)."""
    if value is None:
        return "-"
    for scale, prefix in (
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1.0, ""),
        (1e-3, "m"),
        (1e-6, "µ"),
        (1e-9, "n"),
    ):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"
