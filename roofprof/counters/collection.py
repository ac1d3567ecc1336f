"""Run a command under Nsight Compute: find ``ncu``, plan the metrics, build the command, collect.

The command is an argument list, never a shell string. Metric names are checked against
``ncu --query-metrics`` before collection; names this ncu lacks are dropped with a
:class:`~roofprof.counters.errors.CounterWarning`. Failures raise
:class:`~roofprof.counters.errors.NcuNotFoundError`,
:class:`~roofprof.counters.errors.CounterPermissionError` or
:class:`~roofprof.counters.errors.CollectionError`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofprof.counters.errors import (
    NCU_INSTALL_HINT,
    CollectionError,
    CounterWarning,
    NcuNotFoundError,
    check_permission,
)
from roofprof.counters.metrics import (
    BYTE_METRICS,
    CUDA_CORE_FLOPS,
    CUDA_CORE_FLOPS_EXTRA,
    METRIC_SETS,
    TENSOR_INST_METRIC,
    TIME_METRIC,
    KernelCounters,
    family_for_cc,
    tensor_table,
)
from roofprof.counters.nvtx import DEFAULT_NVTX_INCLUDE
from roofprof.counters.parse import parse_ncu_csv
from roofprof.errors import ConfigError

__all__ = [
    "CACHE_CONTROLS",
    "CLOCK_CONTROLS",
    "Collection",
    "MetricPlan",
    "base_metric_name",
    "build_ncu_command",
    "collect",
    "detect_compute_capability",
    "find_ncu",
    "ncu_version",
    "parse_query_metrics",
    "plan_metrics",
    "query_available_metrics",
    "run_under_ncu",
]

# --------------------------------------------------------------------------- collection


def _install_candidates() -> list[Path]:
    """Where CUDA toolkits and standalone Nsight Compute installs put ncu, newest first."""
    return sorted(Path("/usr/local").glob("cuda*/bin/ncu"), reverse=True) + sorted(
        Path("/opt/nvidia/nsight-compute").glob("*/ncu"), reverse=True
    )


def find_ncu(ncu: str | os.PathLike | None = None) -> str:
    """Path of the ``ncu`` executable: ``ncu`` argument, ``$ROOFPROF_NCU``, PATH, CUDA dirs.

    Raises:
        NcuNotFoundError: none found (the message says how to install it).
    """
    candidates = [str(ncu)] if ncu else []
    if os.environ.get("ROOFPROF_NCU"):
        candidates.append(os.environ["ROOFPROF_NCU"])
    candidates.append("ncu")
    for cand in candidates:
        found = shutil.which(cand)
        if found:
            return found
    if not ncu:
        for cand in _install_candidates():
            if os.access(cand, os.X_OK):
                return str(cand)
    where = f" ({ncu})" if ncu else ""
    raise NcuNotFoundError(f"Nsight Compute `ncu` not found{where}: {NCU_INSTALL_HINT}")


def detect_compute_capability() -> str | None:
    """Compute capability of GPU 0 (``"9.0"``) through NVML, then nvidia-smi; ``None`` if
    neither."""
    from roofprof.devices import _nvml

    try:
        with _nvml.session() as nv:
            handle = _nvml.query("nvmlDeviceGetHandleByIndex", 0, default=None, nvml=nv)
            cc = _nvml.query("nvmlDeviceGetCudaComputeCapability", handle, default=None, nvml=nv)
            if handle is not None and cc:
                return f"{cc[0]}.{cc[1]}"
    except _nvml.NvmlUnavailable:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            first = out.stdout.strip().splitlines()
            if out.returncode == 0 and first and re.fullmatch(r"\d+\.\d+", first[0].strip()):
                return first[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return None


def ncu_version(ncu: str) -> str | None:
    """``ncu --version``'s version number (``"2025.3.1.0"``), or ``None``."""
    try:
        out = subprocess.run(
            [ncu, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"Version\s+([\d.]+)", out.stdout + out.stderr)
    return m.group(1) if m else None


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names (no rollup suffix) listed by ``ncu --query-metrics``.

    >>> text = "Device GH100\\ndram__bytes_read   Counter  byte  # of bytes read"
    >>> sorted(parse_query_metrics(text))
    ['dram__bytes_read']
    """
    names = set()
    for line in text.splitlines():
        token = line.strip().split(" ", 1)[0].split("\t", 1)[0]
        if re.fullmatch(r"[a-z0-9]+__[a-z0-9_]+", token):
            names.add(token)
    return names


def query_available_metrics(
    ncu: str, *, chip: str | None = None, timeout_s: float = 300
) -> set[str] | None:
    """Metric base names this GPU (or ``chip``, e.g. ``"gh100"``) supports, from ncu itself.

    Returns ``None`` (with a :class:`CounterWarning`) when the query fails for a reason
    other than permissions.

    Raises:
        CounterPermissionError: ncu answered ``ERR_NVGPUCTRPERM``.
    """
    cmd = [ncu, "--query-metrics"] + (["--chip", chip] if chip else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        warnings.warn(
            f"`{' '.join(cmd)}` failed ({exc}); metric names not verified",
            CounterWarning,
            stacklevel=2,
        )
        return None
    check_permission(out.stdout + out.stderr)
    names = parse_query_metrics(out.stdout)
    if out.returncode != 0 or not names:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [""]
        warnings.warn(
            f"`{' '.join(cmd)}` exited {out.returncode} ({tail[0][:160]}); "
            "metric names not verified",
            CounterWarning,
            stacklevel=2,
        )
        return None
    return names


@dataclass(frozen=True)
class MetricPlan:
    """The metrics to request from ncu, and the table entries dropped as unavailable."""

    metrics: tuple[str, ...]
    dropped: tuple[str, ...] = ()
    family: str | None = None
    metrics_set: str = "hierarchical"


def base_metric_name(name: str) -> str:
    """A metric name without its rollup suffix, as ``ncu --query-metrics`` lists it.

    >>> base_metric_name("dram__bytes_read.sum")
    'dram__bytes_read'
    """
    return name.split(".", 1)[0]


def plan_metrics(
    family: str | None, metrics_set: str = "hierarchical", available: set[str] | None = None
) -> MetricPlan:
    """Choose the metric names to collect on ``family`` (e.g. ``"hopper"``).

    For each quantity the first alternative whose names are all ``available`` (base names
    as from :func:`query_available_metrics`) is taken; with ``available=None`` the first
    alternative is taken unverified. Names of a first choice that is unavailable are
    returned in ``dropped``.

    Raises:
        ConfigError: unknown ``metrics_set``.

    >>> plan = plan_metrics("hopper", "memory")
    >>> plan.metrics[:3]
    ('gpu__time_duration.sum', 'dram__bytes_read.sum', 'dram__bytes_write.sum')
    """
    if metrics_set not in METRIC_SETS:
        raise ConfigError(
            f"unknown metrics set {metrics_set!r}; valid choices: {', '.join(METRIC_SETS)}"
        )

    def ok(name: str) -> bool:
        return available is None or base_metric_name(name) in available

    chosen: list[str] = []
    dropped: list[str] = []

    def take_alternatives(alternatives: Sequence[Sequence[str]]) -> None:
        for alt in alternatives:
            if all(ok(m) for m in alt):
                chosen.extend(alt)
                return
        dropped.extend(m for m in alternatives[0] if not ok(m))

    def take_each(names: Iterable[str], optional: bool = False) -> None:
        for name in names:
            if ok(name):
                chosen.append(name)
            elif not optional:
                dropped.append(name)

    take_each([TIME_METRIC])
    if metrics_set in ("hierarchical", "memory", "flops"):
        take_alternatives(BYTE_METRICS["dram"])
    if metrics_set in ("hierarchical", "memory"):
        take_alternatives(BYTE_METRICS["l2"])
        take_alternatives(BYTE_METRICS["l1"])
    if metrics_set in ("hierarchical", "flops"):
        for pairs in CUDA_CORE_FLOPS.values():
            take_each(m for m, _ in pairs)
        extra = CUDA_CORE_FLOPS_EXTRA.get(family or "", {})
        for pairs in extra.values():
            # unverified names: only when ncu confirms them
            take_each((m for m, _ in pairs if available is not None), optional=True)
        table = tensor_table(family)
        for alts in table.values():
            take_alternatives([tuple(m for m, _ in alt) for alt in alts])
        take_each([TENSOR_INST_METRIC], optional=True)
    unique = tuple(dict.fromkeys(chosen))
    return MetricPlan(
        unique, tuple(dict.fromkeys(d for d in dropped if d not in unique)), family, metrics_set
    )


CLOCK_CONTROLS = ("none", "base")
CACHE_CONTROLS = ("all", "none")


def build_ncu_command(
    command: Sequence[str],
    out_csv: str | os.PathLike,
    metrics: Sequence[str],
    *,
    ncu: str = "ncu",
    clock_control: str = "none",
    cache_control: str = "all",
    nvtx_include: Sequence[str] | None = DEFAULT_NVTX_INCLUDE,
    launch_count: int | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The ncu argument list (never a shell string) that profiles ``command``.

    Raw CSV page with base units goes to ``out_csv`` (``--log-file``); clocks are left as
    the GPU runs them (``--clock-control none``) unless ``clock_control="base"``; caches
    are flushed before each kernel (``--cache-control all``); with ``nvtx_include``, only
    kernels inside matching NVTX push/pop ranges are profiled.

    Raises:
        ConfigError: empty command or metric list, or an invalid clock/cache control.

    >>> cmd = build_ncu_command(["python", "run.py"], "o.csv", ["gpu__time_duration.sum"])
    >>> cmd[cmd.index("--clock-control") + 1], cmd[-2:]
    ('none', ['python', 'run.py'])
    """
    if not command or not all(isinstance(c, str) and c for c in command):
        raise ConfigError("no command to profile: give it after `--`, e.g. `-- python run.py`")
    if not metrics:
        raise ConfigError("no metrics to collect")
    if clock_control not in CLOCK_CONTROLS:
        raise ConfigError(
            f"invalid clock control {clock_control!r}; valid choices: {', '.join(CLOCK_CONTROLS)}"
        )
    if cache_control not in CACHE_CONTROLS:
        raise ConfigError(
            f"invalid cache control {cache_control!r}; valid choices: {', '.join(CACHE_CONTROLS)}"
        )
    if launch_count is not None and launch_count < 1:
        raise ConfigError(f"launch count must be at least 1, got {launch_count}")
    cmd = [
        ncu,
        "--csv",
        "--page", "raw",
        "--print-units", "base",
        "--clock-control", clock_control,
        "--cache-control", cache_control,
        "--replay-mode", "kernel",
        "--target-processes", "all",
        "--metrics", ",".join(metrics),
        "--log-file", str(out_csv),
    ]  # fmt: skip
    if nvtx_include:
        cmd.append("--nvtx")
        for pattern in nvtx_include:
            cmd += ["--nvtx-include", pattern]
    if launch_count is not None:
        cmd += ["--launch-count", str(launch_count)]
    cmd += list(extra_args)
    cmd += list(command)
    return cmd


@dataclass(frozen=True)
class Collection:
    """The result of :func:`collect`: records plus what was asked of ncu."""

    records: tuple[KernelCounters, ...]
    ncu_command: tuple[str, ...]
    csv_path: str
    plan: MetricPlan
    cc: str | None
    ncu_version: str | None
    verified: bool
    returncode: int


def collect(
    command: Sequence[str],
    out_csv: str | os.PathLike,
    *,
    metrics_set: str = "hierarchical",
    clock_control: str = "none",
    cache_control: str = "all",
    nvtx_include: Sequence[str] | None = DEFAULT_NVTX_INCLUDE,
    launch_count: int | None = None,
    ncu: str | None = None,
    compute_capability: str | None = None,
    verify_metrics: bool = True,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> Collection:
    """Run ``command`` under ncu and parse what it measured (see :func:`run_under_ncu`)."""
    ncu_path = find_ncu(ncu)
    cc = compute_capability or detect_compute_capability()
    family = family_for_cc(cc)
    available = query_available_metrics(ncu_path) if verify_metrics else None
    plan = plan_metrics(family, metrics_set, available)
    if plan.dropped:
        warnings.warn(
            f"{len(plan.dropped)} metric(s) not supported by this GPU/ncu "
            f"({family or 'unknown arch'}), "
            f"dropped: {', '.join(plan.dropped)}",
            CounterWarning,
            stacklevel=2,
        )
    out = Path(out_csv)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = build_ncu_command(
        command, out, plan.metrics, ncu=ncu_path, clock_control=clock_control,
        cache_control=cache_control, nvtx_include=nvtx_include, launch_count=launch_count,
        extra_args=extra_args,
    )  # fmt: skip
    run_env = None if env is None else {**os.environ, **env}
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=run_env, check=False
        )
    except FileNotFoundError as exc:
        raise NcuNotFoundError(
            f"cannot run {ncu_path}: {exc.strerror}: {NCU_INSTALL_HINT}"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise CollectionError(
            f"ncu did not finish within {timeout_s} s: {' '.join(cmd[-len(command) :])}"
        ) from exc
    log = out.read_text(encoding="utf-8-sig", errors="replace") if out.exists() else ""
    combined = "\n".join((proc.stdout, proc.stderr, log))
    check_permission(combined)
    errors = [ln.strip() for ln in combined.splitlines() if ln.strip().startswith("==ERROR==")]
    if '"ID",' not in log:
        if errors:
            raise CollectionError(f"ncu failed (exit {proc.returncode}): {' | '.join(errors[-3:])}")
        if proc.returncode != 0:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise CollectionError(
                f"the command exited {proc.returncode} under ncu, no kernel profiled: {tail}"
            )
        hint = (
            f"no kernel ran inside an NVTX range matching {', '.join(nvtx_include)}: "
            "wrap each op in "
            "roofprof.counters.op_range(name), or profile every kernel (no NVTX filter)"
            if nvtx_include
            else "the command launched no CUDA kernel"
        )
        raise CollectionError(f"ncu profiled no kernel: {hint}")
    records = parse_ncu_csv(log, source=str(out))
    if proc.returncode != 0:
        warnings.warn(
            f"the profiled command exited {proc.returncode}; {len(records)} kernel(s) "
            "were profiled before "
            f"that ({' | '.join(errors[-2:]) or proc.stderr.strip()[-200:]})",
            CounterWarning,
            stacklevel=2,
        )
    return Collection(
        tuple(records),
        tuple(cmd),
        str(out),
        plan,
        cc,
        ncu_version(ncu_path),
        available is not None,
        proc.returncode,
    )


def run_under_ncu(
    command: list[str], out_csv: str | os.PathLike, **options: Any
) -> list[KernelCounters]:
    """Run ``command`` (argument list) under Nsight Compute and return one record per kernel.

    Options (all keyword): ``metrics_set`` (one of :data:`METRIC_SETS`, default
    ``"hierarchical"``), ``clock_control`` (``"none"`` default, or ``"base"``),
    ``cache_control`` (``"all"``: flush caches per kernel), ``nvtx_include`` (default
    :data:`DEFAULT_NVTX_INCLUDE`; ``None`` profiles every kernel), ``launch_count``,
    ``ncu`` (path), ``compute_capability`` (default: detected), ``verify_metrics``
    (check names with ``ncu --query-metrics``, default True), ``timeout_s``, ``env``,
    ``extra_args``. Unsupported metrics are dropped with a :class:`CounterWarning`.

    Raises:
        NcuNotFoundError: no ncu (the message says how to install it).
        CounterPermissionError: ``ERR_NVGPUCTRPERM`` (the message gives the fix).
        CollectionError: ncu failed, or profiled no kernel (e.g. no matching NVTX range).

    Example (on a GPU machine)::

        records = run_under_ncu(["python", "bench.py"], "out/ncu.csv")
    """
    return list(collect(command, out_csv, **options).records)
