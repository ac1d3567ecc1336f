"""The ncu CSV parser as it was before it streamed (roofprof 36edccf), frozen for comparison.

``tests/test_counters_stream.py`` checks that the streaming parser in
``roofprof/counters/parse.py`` gives the same records and warnings as this one on every
fixture and on mutated files. Not used by roofprof itself; do not edit (except imports).
"""

from __future__ import annotations

import csv
import math
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roofprof.counters.errors import (
    CollectionError,
    CounterWarning,
    NotNcuOutputError,
    check_permission,
)
from roofprof.counters.metrics import (
    BASE_UNITS,
    KNOWN_METRICS,
    TIME_METRIC,
    KernelCounters,
    metric_kind,
    parse_number,
    unit_problem,
)
from roofprof.errors import ConfigError

__all__ = ["parse_ncu_csv", "read_ncu_csv"]

# --------------------------------------------------------------------------- CSV parsing

_METRIC_NAME = re.compile(r"^[a-z0-9]+__[A-Za-z0-9_.]+$")
_CHATTER = ("==PROF==", "==WARNING==", "==ERROR==", "==INFO==")
_DETAILS_REQUIRED = ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")
_LABEL_ALIASES = {"Duration": TIME_METRIC}  # details pages printed with --section SpeedOfLight


def _is_chatter(line: str) -> bool:
    return line.startswith(_CHATTER)


def _nvtx_stack(cell: str) -> tuple[str, ...]:
    """Range names from ncu's ``thread Domain:Push/Pop_Range:...`` cell, outermost first.

    The cell holds the thread id then one quoted ``domain:range:payload...`` entry per
    range on the stack, e.g. ``1 "<default domain>:roofprof.gemm:none:none:..."``.
    """
    cell = (cell or "").strip()
    if not cell:
        return ()
    entries = re.findall(r'"([^"]*)"', cell) or [cell]
    names = []
    for entry in entries:
        parts = entry.split(":")
        if len(parts) >= 2 and parts[1].strip() and parts[1].strip().lower() != "none":
            names.append(parts[1].strip())
    return tuple(names)


def _split_row(line: str) -> list[str]:
    return next(csv.reader([line]))


#: Lines between two calls of a parser's ``progress`` callback.
PROGRESS_EVERY = 20_000


def parse_ncu_csv(
    text: str, *, source: str = "<text>", progress: Callable[[int, int], None] | None = None
) -> list[KernelCounters]:
    """Parse Nsight Compute CSV output (details page or ``--page raw``) into records.

    Lines before the header (``==PROF==`` lines, the program's own output, a BOM) are
    skipped, and so are ncu's ``==...==`` lines after it. Numbers may carry thousands
    separators; ``n/a`` values are dropped with a :class:`CounterWarning`. ``progress``, if
    given, is called as ``progress(lines done, lines in all)`` every
    :data:`PROGRESS_EVERY` lines (a 100 MB export has about 200,000).

    Raises:
        NotNcuOutputError: no ``"ID","Process ID",...`` header, or a row that does not fit
            it; the message names the first bad line (1-based).
        CounterPermissionError: the output holds ncu's ``ERR_NVGPUCTRPERM`` error.
        CollectionError: ncu's output says it profiled no kernel.

    >>> csv_text = '''==PROF== Connected to process 1
    ... "ID","Process ID","Kernel Name","CC","gpu__time_duration.sum","dram__bytes.sum"
    ... "","","","","nsecond","Mbyte"
    ... "0","1","k","9.0","1,500","2.5"'''
    >>> [(k.name, k.time_s, k.dram_bytes) for k in parse_ncu_csv(csv_text)]
    [('k', 1.5e-06, 2500000.0)]
    """
    lines = text.splitlines()
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    header_at = None
    first_bad: tuple[int, str] | None = None
    no_kernels = None
    for i, raw in enumerate(lines):
        line = raw.strip()
        check_permission(line)
        if line.startswith('"ID",'):
            header_at = i
            break
        if "No kernels were profiled" in line:
            no_kernels = line
        if line and not _is_chatter(line) and first_bad is None:
            first_bad = (i + 1, raw)
    if header_at is None:
        if no_kernels:
            raise CollectionError(f"{source}: ncu profiled no kernel ({no_kernels.strip()})")
        if first_bad is None:
            raise NotNcuOutputError(
                f"{source} is not Nsight Compute CSV output: line {len(lines) or 1}: no CSV "
                'header (expected a line starting with "ID","Process ID" from `ncu --csv`)'
            )
        n, bad = first_bad
        raise NotNcuOutputError(
            f"{source} is not Nsight Compute CSV output: line {n}: {bad[:120]!r}; expected a "
            'header starting with "ID","Process ID" (from `ncu --csv`)'
        )
    header = _split_row(lines[header_at].strip())
    rows: list[tuple[int, list[str]]] = []
    for i in range(header_at + 1, len(lines)):
        if progress is not None and i % PROGRESS_EVERY == 0:
            progress(i, len(lines))
        line = lines[i].strip()
        check_permission(line)
        if not line or _is_chatter(line):
            continue
        try:
            cells = _split_row(line)
        except csv.Error as exc:
            raise NotNcuOutputError(
                f"{source}: line {i + 1}: not a CSV row ({exc}): {line[:120]!r}"
            ) from exc
        short = len(header) - len(cells)
        if 0 < short <= 3 and all(h.startswith("Rule ") for h in header[len(cells) :]):
            cells += [""] * short  # older ncu ends metric rows before the Rule columns
        if len(cells) != len(header):
            raise NotNcuOutputError(
                f"{source}: line {i + 1}: {len(cells)} fields where the header has {len(header)}: "
                f"{line[:120]!r}"
            )
        rows.append((i + 1, cells))
    if progress is not None:
        progress(len(lines), len(lines))
    if "Metric Name" in header:
        missing = [c for c in _DETAILS_REQUIRED if c not in header]
        if missing:
            raise NotNcuOutputError(
                f"{source}: line {header_at + 1}: details-page header lacks {', '.join(missing)}"
            )
        return _parse_details(header, rows, source)
    if "Kernel Name" not in header:
        raise NotNcuOutputError(
            f'{source}: line {header_at + 1}: header has no "Kernel Name" column'
        )
    return _parse_raw(header, rows, source)


def _kernel_info(header: list[str], cells: list[str]) -> dict[str, Any]:
    col = {h: i for i, h in enumerate(header)}

    def get(name: str) -> str | None:
        if name not in col:
            return None
        return cells[col[name]].strip() or None

    nvtx_cols = [i for i, h in enumerate(header) if "Push/Pop_Range" in h]
    stack: tuple[str, ...] = ()
    for i in nvtx_cols:
        stack += _nvtx_stack(cells[i])
    return {
        "name": get("Kernel Name") or "?",
        "cc": get("CC"),
        "device": get("Device"),
        "grid_size": get("Grid Size"),
        "block_size": get("Block Size"),
        "process": get("Process Name") or get("Process ID"),
        "nvtx_ranges": stack,
    }


def _metric_value(
    text: str, metric: str, line_no: int, source: str, na: list[str]
) -> float | str | None:
    try:
        value = parse_number(text)
    except ValueError:
        if metric in KNOWN_METRICS:
            raise NotNcuOutputError(
                f"{source}: line {line_no}: metric {metric} has the non-numeric value {text[:40]!r}"
            ) from None
        return text.strip()
    if value is None:
        na.append(metric)
    elif metric_kind(metric) is not None and not (math.isfinite(value) and value >= 0):
        raise NotNcuOutputError(
            f"{source}: line {line_no}: metric {metric} has the value {text.strip()[:40]!r}; "
            "a count, time or byte total must be a finite number >= 0"
        )
    return value


def _kernel_id(text: str, line_no: int, source: str) -> int:
    """The kernel ID of a row: ASCII digits only (``"²"`` passes ``isdigit()``, not this)."""
    kid = text.strip()
    if not re.fullmatch(r"[0-9]{1,18}", kid):
        raise NotNcuOutputError(
            f"{source}: line {line_no}: kernel ID {kid[:40]!r} is not a non-negative integer"
        )
    return int(kid)


def _unit(metric: str, unit: str, line_no: int, source: str, missing: list[str]) -> str:
    """``unit`` when it fits ``metric``; an empty unit of a used metric becomes its base unit
    (noted in ``missing`` for one warning); a unit that does not fit is an error."""
    problem = unit_problem(metric, unit)
    if problem:
        raise NotNcuOutputError(
            f"{source}: line {line_no}: {metric} is {problem}; values would be rescaled wrongly"
        )
    kind = metric_kind(metric)
    if not unit.strip() and kind in ("time", "bytes"):
        missing.append(metric)
        return BASE_UNITS[kind]
    return unit


def _warn_missing_units(missing: list[str], source: str) -> None:
    if missing:
        names = sorted(set(missing))
        warnings.warn(
            f"{source}: no unit for {', '.join(names[:4])}{' ...' if len(names) > 4 else ''} "
            "(units row missing?); assumed base units (nsecond, byte) as "
            "`ncu --print-units base` prints them",
            CounterWarning,
            stacklevel=3,
        )


def _warn_na(na: list[str], source: str) -> None:
    if na:
        names = sorted(set(na))
        warnings.warn(
            f"{source}: {len(names)} metric(s) reported n/a (not supported on this GPU or ncu): "
            f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''}; dropped",
            CounterWarning,
            stacklevel=3,
        )


def _parse_details(
    header: list[str], rows: list[tuple[int, list[str]]], source: str
) -> list[KernelCounters]:
    col = {h: i for i, h in enumerate(header)}
    kernels: dict[int, dict[str, Any]] = {}
    na: list[str] = []
    missing: list[str] = []
    if not rows:
        raise NotNcuOutputError(f"{source}: no kernel rows after the header (file cut short?)")
    for line_no, cells in rows:
        kid = _kernel_id(cells[col["ID"]], line_no, source)
        entry = kernels.get(kid)
        if entry is None:
            entry = kernels[kid] = {"info": _kernel_info(header, cells), "metrics": {}}
        name = cells[col["Metric Name"]].strip()
        if not name:
            continue  # rule rows and section headers carry no metric
        alias = _LABEL_ALIASES.get(name)
        raw_unit = cells[col["Metric Unit"]].strip()
        unit = _unit(alias or name, raw_unit, line_no, source, missing)
        value = _metric_value(cells[col["Metric Value"]], alias or name, line_no, source, na)
        if value is None:
            continue
        entry["metrics"].setdefault(name, (value, unit))
        if alias and isinstance(value, float):
            entry["metrics"].setdefault(alias, (value, unit))
    _warn_na(na, source)
    _warn_missing_units(missing, source)
    return [
        KernelCounters(kid, metrics=e["metrics"], source=f"{source} (details page)", **e["info"])
        for kid, e in kernels.items()
    ]


def _parse_raw(
    header: list[str], rows: list[tuple[int, list[str]]], source: str
) -> list[KernelCounters]:
    col = {h: i for i, h in enumerate(header)}
    metric_cols = [(i, h) for i, h in enumerate(header) if _METRIC_NAME.match(h)]
    units = [""] * len(header)
    if "ID" not in col:
        raise NotNcuOutputError(f'{source}: raw-page header has no "ID" column')
    if not metric_cols:
        raise NotNcuOutputError(
            f"{source}: the header has no metric columns (names such as "
            "gpu__time_duration.sum); not a raw page or details page"
        )
    units_line = None
    if rows and not rows[0][1][col["ID"]].strip():  # the units row under the header
        units = [u.strip() for u in rows[0][1]]
        units_line, rows = rows[0][0], rows[1:]
    if not rows:
        raise NotNcuOutputError(f"{source}: no kernel rows after the header (file cut short?)")
    missing: list[str] = []
    for i, name in metric_cols:
        units[i] = _unit(name, units[i], units_line or rows[0][0], source, missing)
    records = []
    na: list[str] = []
    for line_no, cells in rows:
        kid = _kernel_id(cells[col["ID"]], line_no, source)
        metrics: dict[str, tuple[float | str, str]] = {}
        for i, name in metric_cols:
            value = _metric_value(cells[i], name, line_no, source, na)
            if value is not None:
                metrics[name] = (value, units[i])
        records.append(
            KernelCounters(
                kid, metrics=metrics, source=f"{source} (raw page)", **_kernel_info(header, cells)
            )
        )
    _warn_na(na, source)
    _warn_missing_units(missing, source)
    return records


def read_ncu_csv(
    path: str | os.PathLike, progress: Callable[[int, int], None] | None = None
) -> list[KernelCounters]:
    """Read an Nsight Compute CSV file (details or raw page); see :func:`parse_ncu_csv`.

    Raises:
        ConfigError: the file is missing or not text; NotNcuOutputError as in parse_ncu_csv.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError as exc:
        raise ConfigError(f"file not found: {str(p)!r}") from exc
    except UnicodeDecodeError as exc:
        raise NotNcuOutputError(
            f"{str(p)!r} is not Nsight Compute CSV output: not UTF-8 text ({exc.reason})"
        ) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {str(p)!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # a NUL in the name
        raise ConfigError(f"cannot read {str(p)[:200]!r}: {exc}") from exc
    return parse_ncu_csv(text, source=str(p), progress=progress)
