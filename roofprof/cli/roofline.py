"""``roofprof roofline`` (measure this machine's roofline) and ``roofprof doctor`` (what is available)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer

from roofprof.cli import app
from roofprof.errors import ConfigError, RoofprofError

FORMATS = ("table", "json")


class RunInterrupted(RoofprofError):
    """Ctrl-C during a measurement: what finished is written; exit code 130."""

    exit_code = 130


@app.command()
def roofline(
    device: str = typer.Option("auto", "--device", "-d", help="auto | cpu | cuda:N."),
    quick: bool = typer.Option(False, "--quick", help="Fewer sizes and shorter budgets (about 30 s on 2 cores)."),
    out: Path = typer.Option(Path("roofprof-roofline"), "--out", "-o", help="Folder for roofline.json and the PNGs."),
    fmt: str = typer.Option("table", "--format", "-f", help="table | json (the summary on stdout)."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Draw the roofline, staircase and sweep PNGs."),
    plan: str | None = typer.Option(None, "--plan", hidden=True, help="full | quick | test (test: tiny budgets, for CI)."),
) -> None:
    """Measure the roofline of this machine: bandwidth per memory level, peak compute per dtype, best GEMM,
    and an intensity sweep; write roofline.json and plots."""
    from roofprof.devices import select_device
    from roofprof.probes import RooflineInterrupted, measure_roofline
    from roofprof.results import check_writable_dir

    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; valid choices: {', '.join(FORMATS)}")
    if plan is not None and plan not in ("full", "quick", "test"):
        raise ConfigError(f"unknown plan {plan!r}; valid choices: full, quick, test")
    folder = check_writable_dir(out)  # before any measurement
    selection = select_device(device)
    dev = selection.device
    err = _console(stderr=True)
    err.print(f"device: [bold]{dev.info.name}[/] ({dev.info.label}) — {selection.reason}")
    json_path = folder / "roofline.json"

    def checkpoint(partial) -> None:
        partial.write(json_path)

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    plan_name = plan or ("quick" if quick else "full")
    try:
        with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                      console=err, transient=True) as bar:
            task = bar.add_task("measuring", total=None)

            def progress(done: int, total: int, label: str) -> None:
                bar.update(task, completed=done, total=total, description=label)

            result = measure_roofline(dev, quick=quick, progress=progress, plan=plan_name, checkpoint=checkpoint)
    except RooflineInterrupted as exc:
        exc.result.write(json_path)
        raise RunInterrupted(f"interrupted during {exc.during}; kept {len(exc.result.ceilings)} finished "
                             f"ceilings in {json_path} (marked incomplete)") from None
    result.write(json_path)
    written = [json_path]
    if plots:
        written += _plots(result, folder, err)
    if fmt == "json":
        sys.stdout.write(json.dumps(_summary_payload(result, written), indent=2) + "\n")
    else:
        _print_table(result, written)


def _plots(result, folder: Path, err) -> list[Path]:
    from roofprof.plots.sweeps import plot_intensity_sweep, plot_staircase

    paths: list[Path] = []
    jobs: list[tuple[str, Any]] = [
        ("roofline.png", lambda p: _plot_roofline(result, p)),
        ("staircase.png", lambda p: plot_staircase(result, p)),
        ("intensity_sweep.png", lambda p: plot_intensity_sweep(result, p)),
    ]
    for name, draw in jobs:
        try:
            paths.append(draw(folder / name))
        except (ValueError, RoofprofError) as exc:  # a missing sweep or ceiling: skip that chart
            err.print(f"[yellow]skipped {name}: {exc}[/]")
    return paths


def _plot_roofline(result, path: Path) -> Path:
    from roofprof.plots.roofline import plot_roofline

    spec = None
    if result.device.spec_id:
        from roofprof.roofline import Roofline
        from roofprof.specs import load_gpu

        spec = Roofline.from_spec(load_gpu(result.device.spec_id))
    if "dram" not in result.roofline.levels:
        raise ValueError("no DRAM ceiling measured")
    return plot_roofline(result.roofline, (), path, dtypes=list(result.roofline.dtypes), spec=spec,
                         title=f"Measured roofline: {result.device.name} ({result.device.label})")


def _fmt_value(value: float, unit: str) -> str:
    if unit == "bytes/s":
        return f"{value / 1e9:,.1f} GB/s"
    return f"{value / 1e9:,.1f} GFLOP/s"


def _summary_payload(result, written: list[Path]) -> dict[str, Any]:
    return {
        "device": result.device.to_dict(),
        "complete": result.complete,
        "ceilings": [{k: c.get(k) for k in ("name", "kind", "level", "dtype", "value", "unit", "clock_mhz",
                                            "median_value", "noisy", "source")} for c in result.ceilings],
        "spec_comparison": dict(result.spec_comparison),
        "warnings": list(result.warnings),
        "elapsed_s": result.elapsed_s,
        "files": [str(p) for p in written],
    }


def _print_table(result, written: list[Path]) -> None:
    from rich.table import Table

    con = _console()
    spec_rows = {r["ceiling"]: r for r in result.spec_comparison.get("rows", [])}
    table = Table(title=f"Measured roofline: {result.device.name} ({result.device.label}, "
                        f"{result.device.compute_units} {'cores' if result.device.kind == 'cpu' else 'SMs'})")
    for col, just in (("ceiling", "left"), ("kind", "left"), ("level/dtype", "left"), ("best", "right"),
                      ("median", "right"), ("clock MHz", "right"), ("spec %", "right"), ("", "left")):
        table.add_column(col, justify=just)
    for c in result.ceilings:
        spec = spec_rows.get(c["name"])
        table.add_row(c["name"], c["kind"], c.get("level") or c.get("dtype") or "",
                      _fmt_value(c["value"], c["unit"]),
                      _fmt_value(c["median_value"], c["unit"]) if c.get("median_value") else "",
                      f"{c['clock_mhz']:.0f}" if c.get("clock_mhz") else "",
                      f"{spec['percent_of_spec']:.0f}%" if spec else "—", "noisy" if c.get("noisy") else "")
    con.print(table)
    r = result.roofline
    for d in r.dtypes:
        if "dram" in r.levels:
            con.print(f"ridge {d}: {r.ridge(d):,.2f} FLOP/byte (peak {r.compute_peak(d) / 1e9:,.1f} GFLOP/s, "
                      f"DRAM {r.memory_bandwidth('dram') / 1e9:,.1f} GB/s)")
    if not result.spec_comparison.get("available"):
        con.print(f"spec comparison: {result.spec_comparison.get('note', 'none')}")
    for w in result.warnings:
        con.print(f"[yellow]warning:[/] {w}")
    con.print(f"measured in {result.elapsed_s:.1f} s; wrote {', '.join(str(p) for p in written)}")


def _console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if getattr(stream, "isatty", lambda: False)() else 160
    return Console(file=stream, highlight=False, width=width)


# --------------------------------------------------------------------------- doctor


def _version(module: str) -> str | None:
    try:
        from importlib import metadata

        return metadata.version(module)
    except Exception:  # noqa: BLE001
        return None


def _tool(name: str, args: list[str]) -> tuple[bool, str]:
    path = shutil.which(name)
    if path is None:
        return False, f"{name} not on PATH"
    try:
        out = subprocess.run([path, *args], capture_output=True, text=True, timeout=20)
        lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
        return True, f"{path}: {lines[-1].strip() if lines else 'no version output'}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{path} failed to run: {exc}"


def doctor_report() -> list[dict[str, Any]]:
    """Rows ``{component, ok, detail}``: devices, NVML, nvcc, ncu, torch, cupy, numba(-cuda)."""
    rows: list[dict[str, Any]] = []

    def add(component: str, ok: bool, detail: str) -> None:
        rows.append({"component": component, "ok": bool(ok), "detail": detail})

    from roofprof.devices import cuda_devices, select_device
    from roofprof.devices.cpu import cpu_info

    info = cpu_info()
    caches = ", ".join(f"{k.upper()} {v // 1024} KiB" for k, v in info.cache_bytes.items()) or "cache sizes unknown"
    add("cpu", True, f"{info.name}: {info.compute_units} cores, {caches}, {info.memory_bytes / 2**30:.1f} GiB RAM, "
                     f"ISA {info.extra.get('isa', '?')}")
    try:
        import numba

        add("numba", True, f"{numba.__version__}, {numba.get_num_threads()} threads")
    except ImportError as exc:
        add("numba", False, f"not importable: {exc}")
    names, reason = cuda_devices()
    nvml_version = _version("nvidia-ml-py")
    if names:
        add("nvml", True, f"nvidia-ml-py {nvml_version}; GPUs: " + "; ".join(f"cuda:{i} {n}" for i, n in enumerate(names)))
    else:
        add("nvml", False, f"nvidia-ml-py {nvml_version or 'not installed'}: {reason}")
    try:
        sel = select_device("auto")
        add("auto device", True, f"{sel.device.info.label}: {sel.reason}")
    except Exception as exc:  # noqa: BLE001
        add("auto device", False, str(exc))
    add("cuda device support", importlib.util.find_spec("roofprof.devices.cuda") is not None,
        "roofprof.devices.cuda present" if importlib.util.find_spec("roofprof.devices.cuda")
        else "roofprof.devices.cuda missing: only the CPU device can be measured")
    ok, detail = _tool("nvcc", ["--version"])
    add("nvcc", ok, detail)
    ok, detail = _tool("ncu", ["--version"])
    add("ncu", ok, detail)
    try:
        import torch

        cuda = torch.cuda.is_available()
        add("torch", True, f"{torch.__version__}; CUDA {'available' if cuda else 'not available'}"
                           + (f" ({torch.cuda.get_device_name(0)})" if cuda else ""))
    except Exception as exc:  # noqa: BLE001
        add("torch", False, f"not importable: {exc}")
    try:
        import cupy

        avail = cupy.is_available()
        add("cupy", bool(avail), f"{cupy.__version__}; " + ("GPU available" if avail else "no usable GPU/driver"))
    except Exception as exc:  # noqa: BLE001
        add("cupy", False, f"not importable: {type(exc).__name__}: {exc}")
    try:
        from numba import cuda as ncuda

        sim = bool(getattr(ncuda, "simulator_enabled", False)) or "simulator" in type(ncuda).__module__
        avail = ncuda.is_available()
        version = _version("numba-cuda")
        detail = f"numba-cuda {version or '(built-in numba.cuda)'}; " + (
            "simulator (NUMBA_ENABLE_CUDASIM=1)" if sim else ("GPU available" if avail else "no usable GPU/driver"))
        add("numba-cuda", bool(avail) and not sim, detail)
    except Exception as exc:  # noqa: BLE001
        add("numba-cuda", False, f"not importable: {exc}")
    return rows


@app.command()
def doctor(
    fmt: str = typer.Option("table", "--format", "-f", help="table | json."),
) -> None:
    """Report what is available here (devices, NVML, nvcc, ncu, torch, cupy, numba-cuda) and why anything is missing."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; valid choices: {', '.join(FORMATS)}")
    rows = doctor_report()
    if fmt == "json":
        sys.stdout.write(json.dumps({"components": rows}, indent=2) + "\n")
        return
    from rich.table import Table

    table = Table(title="roofprof doctor")
    table.add_column("component")
    table.add_column("status")
    table.add_column("detail")
    for r in rows:
        table.add_row(r["component"], "[green]ok[/]" if r["ok"] else "[yellow]missing[/]", r["detail"])
    _console().print(table)
