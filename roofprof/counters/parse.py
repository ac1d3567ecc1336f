"""Parse Nsight Compute output: CSV (details page and ``--page raw``) and ``.ncu-rep`` reports."""

from __future__ import annotations

import csv
import math
import os
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

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
from roofprof.errors import ConfigError, DeviceUnavailableError

__all__ = ["load_counters", "parse_ncu_csv", "read_ncu_csv", "read_ncu_report"]

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
    """The cells of one stripped CSV line, as ``csv.reader`` reads them.

    ncu quotes every cell, so a line with no quote inside a cell splits on ``","`` (the
    common case, about 5× faster); any other line goes through :mod:`csv`.
    """
    if len(line) > 1 and line[0] == '"' and line[-1] == '"' and "\0" not in line:
        cells = line[1:-1].split('","')
        if line.count('"') == 2 * len(cells):
            return cells
    return next(csv.reader([line]))


#: Lines between two calls of a parser's ``progress`` callback.
PROGRESS_EVERY = 20_000
_END = 2**62  # the last progress tick: "all lines done"


def parse_ncu_csv(
    text: str, *, source: str = "<text>", progress: Callable[[int, int], None] | None = None
) -> list[KernelCounters]:
    """Parse Nsight Compute CSV output (details page or ``--page raw``) into records.

    Lines before the header (``==PROF==`` lines, the program's own output, a BOM) are
    skipped, and so are ncu's ``==...==`` lines after it. Numbers may carry thousands
    separators; ``n/a`` values are dropped with a :class:`CounterWarning`. ``progress``, if
    given, is called as ``progress(lines done, lines in all)`` every
    :data:`PROGRESS_EVERY` lines (a 100 MB export has about 400,000). Rows are parsed one
    at a time and folded into their kernel as they come (see :func:`read_ncu_csv`, which
    streams a file without holding its text).

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
    tick = None
    if progress is not None:
        total = len(lines)

        def tick(done: int) -> None:
            progress(min(done, total), total)

    return _parse_lines(iter(lines), source, tick)


def _parse_lines(
    lines: Iterator[str], source: str, tick: Callable[[int], None] | None
) -> list[KernelCounters]:
    """Parse ncu CSV lines one at a time: ``tick(lines read)`` every :data:`PROGRESS_EVERY`
    lines and once at the end; the first defect in file order is the error."""
    header, header_no = _find_header(lines, source)
    if "Metric Name" in header:
        missing = [c for c in _DETAILS_REQUIRED if c not in header]
        if missing:
            raise NotNcuOutputError(
                f"{source}: line {header_no}: details-page header lacks {', '.join(missing)}"
            )
        parser: _Details | _Raw = _Details(header, source)
    elif "Kernel Name" not in header:
        raise NotNcuOutputError(f'{source}: line {header_no}: header has no "Kernel Name" column')
    else:
        parser = _Raw(header, source)
    line_no = header_no
    for line_no, cells in _rows(lines, header, header_no, source, tick):
        parser.add(line_no, cells)
    if tick is not None:
        tick(_END)
    return parser.finish()


def _find_header(lines: Iterator[str], source: str) -> tuple[list[str], int]:
    """The header's cells and its line number; the lines before it are consumed."""
    first_bad: tuple[int, str] | None = None
    no_kernels = None
    count = 0
    for count, raw in enumerate(lines, 1):
        if count == 1 and raw.startswith("\ufeff"):
            raw = raw[1:]
        line = raw.strip()
        check_permission(line)
        if line.startswith('"ID",'):
            return _split_row(line), count
        if "No kernels were profiled" in line:
            no_kernels = line
        if line and not _is_chatter(line) and first_bad is None:
            first_bad = (count, raw)
    if no_kernels:
        raise CollectionError(f"{source}: ncu profiled no kernel ({no_kernels.strip()})")
    if first_bad is None:
        raise NotNcuOutputError(
            f"{source} is not Nsight Compute CSV output: line {count or 1}: no CSV "
            'header (expected a line starting with "ID","Process ID" from `ncu --csv`)'
        )
    n, bad = first_bad
    raise NotNcuOutputError(
        f"{source} is not Nsight Compute CSV output: line {n}: {bad[:120]!r}; expected a "
        'header starting with "ID","Process ID" (from `ncu --csv`)'
    )


#: Physical lines one quoted cell may span before the file is called malformed (the csv
#: module holds a record's text until it closes, so this bounds one record's memory).
MAX_RECORD_LINES = 10_000


class _Feed:
    """The physical lines after the header, handed to :func:`csv.reader` one at a time.

    Between records (``boundary``) blank lines and ncu's ``==...==`` lines are skipped and
    the record's first line number and text are noted; inside a quoted cell that spans
    lines (ncu 2021.2 writes a rule's Python error with a line break) every line is passed
    on as it is, newline included, so the cell keeps it.
    """

    def __init__(
        self, lines: Iterator[str], first_no: int, source: str, tick: Callable[[int], None] | None
    ) -> None:
        self.lines, self.first_no, self.source, self.tick = lines, first_no, source, tick
        self.boundary = True
        self.start, self.text, self.held = first_no, "", 0
        self.open_at_end = False

    def __iter__(self) -> Iterator[str]:
        for line_no, raw in enumerate(self.lines, self.first_no):
            if self.tick is not None and (line_no - 1) % PROGRESS_EVERY == 0:
                self.tick(line_no - 1)
            if not self.boundary:  # the csv module asks for more: a quoted cell is open
                self.held += 1
                if self.held > MAX_RECORD_LINES:
                    raise NotNcuOutputError(
                        f"{self.source}: line {self.start}: a quoted cell spans more than "
                        f"{MAX_RECORD_LINES} lines (an unmatched quote?)"
                    )
                yield raw + "\n"
                continue
            line = raw.strip()
            check_permission(line)
            if not line or _is_chatter(line):
                continue
            self.boundary, self.start, self.text, self.held = False, line_no, line, 0
            yield line + "\n"
        self.open_at_end = not self.boundary


def _rows(
    lines: Iterator[str],
    header: list[str],
    header_no: int,
    source: str,
    tick: Callable[[int], None] | None,
) -> Iterator[tuple[int, list[str]]]:
    """``(first line number, cells)`` of each CSV record after the header, read by the csv
    module as the file streams (a quoted cell may span lines) and checked against the header."""
    width = len(header)
    feed = _Feed(lines, header_no + 1, source, tick)
    reader = csv.reader(feed)
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise NotNcuOutputError(
                f"{source}: line {feed.start}: not a CSV row ({exc}): {feed.text[:120]!r}"
            ) from exc
        line_no, line = feed.start, feed.text
        feed.boundary = True
        if feed.open_at_end:
            if feed.held:
                raise NotNcuOutputError(
                    f"{source}: line {line_no}: a quoted cell opened here is not closed by "
                    "the end of the file (file cut short?)"
                )
            cells[-1] = cells[-1].removesuffix("\n")  # a last line cut inside a cell
        short = width - len(cells)
        if 0 < short <= 3 and all(h.startswith("Rule ") for h in header[len(cells) :]):
            cells += [""] * short  # older ncu ends metric rows before the Rule columns
        if len(cells) != width:
            raise NotNcuOutputError(
                f"{source}: line {line_no}: {len(cells)} fields where the header has {width}: "
                f"{line[:120]!r}"
            )
        yield line_no, cells


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
    text: str, metric: str, line_no: int, source: str, na: set[str]
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
        na.add(metric)
    elif metric_kind(metric) is not None and not (math.isfinite(value) and value >= 0):
        raise NotNcuOutputError(
            f"{source}: line {line_no}: metric {metric} has the value {text.strip()[:40]!r}; "
            "a count, time or byte total must be a finite number >= 0"
        )
    return value


_KERNEL_ID = re.compile(r"[0-9]{1,18}")


def _kernel_id(text: str, line_no: int, source: str) -> int:
    """The kernel ID of a row: ASCII digits only (``"²"`` passes ``isdigit()``, not this)."""
    kid = text.strip()
    if not _KERNEL_ID.fullmatch(kid):
        raise NotNcuOutputError(
            f"{source}: line {line_no}: kernel ID {kid[:40]!r} is not a non-negative integer"
        )
    return int(kid)


def _unit(metric: str, unit: str, line_no: int, source: str, missing: set[str]) -> str:
    """``unit`` when it fits ``metric``; an empty unit of a used metric becomes its base unit
    (noted in ``missing`` for one warning); a unit that does not fit is an error."""
    problem = unit_problem(metric, unit)
    if problem:
        raise NotNcuOutputError(
            f"{source}: line {line_no}: {metric} is {problem}; values would be rescaled wrongly"
        )
    kind = metric_kind(metric)
    if not unit.strip() and kind in ("time", "bytes", "clock"):
        missing.add(metric)
        return BASE_UNITS[kind]
    return unit


def _warn_missing_units(missing: set[str], source: str) -> None:
    if missing:
        names = sorted(missing)
        warnings.warn(
            f"{source}: no unit for {', '.join(names[:4])}{' ...' if len(names) > 4 else ''} "
            "(units row missing?); assumed base units (nsecond, byte, cycle/second) as "
            "`ncu --print-units base` prints them",
            CounterWarning,
            stacklevel=4,
        )


def _warn_na(na: set[str], source: str) -> None:
    if na:
        names = sorted(na)
        warnings.warn(
            f"{source}: {len(names)} metric(s) reported n/a (not supported on this GPU or ncu): "
            f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''}; dropped",
            CounterWarning,
            stacklevel=4,
        )


class _Details:
    """Folds details-page rows (one metric per row) into one record per kernel ID as they come."""

    def __init__(self, header: list[str], source: str) -> None:
        self.header, self.source = header, source
        col = {h: i for i, h in enumerate(header)}
        self.at = (col["ID"], col["Metric Name"], col["Metric Unit"], col["Metric Value"])
        self.kernels: dict[int, dict[str, Any]] = {}
        self.na: set[str] = set()
        self.missing: set[str] = set()
        self.units: dict[tuple[str, str], tuple[str, bool]] = {}  # (metric, unit) -> checked
        self.rows = 0

    def add(self, line_no: int, cells: list[str]) -> None:
        self.rows += 1
        id_at, name_at, unit_at, value_at = self.at
        kid = _kernel_id(cells[id_at], line_no, self.source)
        entry = self.kernels.get(kid)
        if entry is None:
            entry = self.kernels[kid] = {"info": _kernel_info(self.header, cells), "metrics": {}}
        name = cells[name_at].strip()
        if not name:
            return  # rule rows and section headers carry no metric
        alias = _LABEL_ALIASES.get(name)
        unit = self._unit(alias or name, cells[unit_at].strip(), line_no)
        value = _metric_value(cells[value_at], alias or name, line_no, self.source, self.na)
        if value is None:
            return
        metrics = entry["metrics"]
        metrics.setdefault(name, (value, unit))
        if alias and isinstance(value, float):
            metrics.setdefault(alias, (value, unit))

    def _unit(self, metric: str, raw_unit: str, line_no: int) -> str:
        known = self.units.get((metric, raw_unit))
        if known is None:
            missing: set[str] = set()
            known = self.units[(metric, raw_unit)] = (
                _unit(metric, raw_unit, line_no, self.source, missing),
                bool(missing),
            )
        if known[1]:
            self.missing.add(metric)
        return known[0]

    def finish(self) -> list[KernelCounters]:
        if not self.rows:
            raise NotNcuOutputError(
                f"{self.source}: no kernel rows after the header (file cut short?)"
            )
        _warn_na(self.na, self.source)
        _warn_missing_units(self.missing, self.source)
        return [
            KernelCounters(
                kid, metrics=e["metrics"], source=f"{self.source} (details page)", **e["info"]
            )
            for kid, e in self.kernels.items()
        ]


class _Raw:
    """Turns raw-page rows (one kernel per row, one metric per column) into records as they come."""

    def __init__(self, header: list[str], source: str) -> None:
        self.header, self.source = header, source
        col = {h: i for i, h in enumerate(header)}
        if "ID" not in col:
            raise NotNcuOutputError(f'{source}: raw-page header has no "ID" column')
        self.id_at = col["ID"]
        self.metric_cols = [(i, h) for i, h in enumerate(header) if _METRIC_NAME.match(h)]
        if not self.metric_cols:
            raise NotNcuOutputError(
                f"{source}: the header has no metric columns (names such as "
                "gpu__time_duration.sum); not a raw page or details page"
            )
        self.units: list[str] | None = None  # checked at the first kernel row
        self.units_row: tuple[int, list[str]] | None = None
        self.first = True
        self.records: list[KernelCounters] = []
        self.na: set[str] = set()
        self.missing: set[str] = set()

    def add(self, line_no: int, cells: list[str]) -> None:
        if self.first:
            self.first = False
            if not cells[self.id_at].strip():  # the units row under the header
                self.units_row = (line_no, [u.strip() for u in cells])
                return
        if self.units is None:
            units_line, units = self.units_row or (line_no, [""] * len(self.header))
            for i, name in self.metric_cols:
                units[i] = _unit(name, units[i], units_line, self.source, self.missing)
            self.units = units
        kid = _kernel_id(cells[self.id_at], line_no, self.source)
        metrics: dict[str, tuple[float | str, str]] = {}
        for i, name in self.metric_cols:
            value = _metric_value(cells[i], name, line_no, self.source, self.na)
            if value is not None:
                metrics[name] = (value, self.units[i])
        self.records.append(
            KernelCounters(
                kid,
                metrics=metrics,
                source=f"{self.source} (raw page)",
                **_kernel_info(self.header, cells),
            )
        )

    def finish(self) -> list[KernelCounters]:
        if not self.records:
            raise NotNcuOutputError(
                f"{self.source}: no kernel rows after the header (file cut short?)"
            )
        _warn_na(self.na, self.source)
        _warn_missing_units(self.missing, self.source)
        return self.records


def read_ncu_csv(
    path: str | os.PathLike, progress: Callable[[int, int], None] | None = None
) -> list[KernelCounters]:
    """Read an Nsight Compute CSV file (details or raw page); see :func:`parse_ncu_csv`.

    The file is streamed: read line by line and folded into per-kernel records as it goes,
    so memory grows with the kernels, not with the file (a 100 MB export: see
    BENCHMARKS.md). ``progress``, if given, is called as ``progress(bytes read, bytes in
    all)`` every :data:`PROGRESS_EVERY` lines and once at the end.

    Raises:
        ConfigError: the file is missing or cannot be read; NotNcuOutputError as in
            parse_ncu_csv, and for a file that is not UTF-8 text.
    """
    p = Path(path)
    try:
        f = open(p, "rb")  # closed by the with below
    except FileNotFoundError as exc:
        raise ConfigError(f"file not found: {str(p)!r}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {str(p)!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # a NUL in the name
        raise ConfigError(f"cannot read {str(p)[:200]!r}: {exc}") from exc
    with f:
        tick = None
        if progress is not None:
            total = _size(f)

            def tick(_lines: int) -> None:
                progress(min(f.tell(), total), total)

        try:
            return _parse_lines(_text_lines(f), str(p), tick)
        except UnicodeDecodeError as exc:
            raise NotNcuOutputError(
                f"{str(p)!r} is not Nsight Compute CSV output: not UTF-8 text ({exc.reason})"
            ) from exc
        except OSError as exc:  # a folder (on some systems), an I/O error mid-file
            raise ConfigError(f"cannot read {str(p)!r}: {exc.strerror or exc}") from exc


def _size(f: BinaryIO) -> int:
    try:
        return os.fstat(f.fileno()).st_size
    except OSError:
        return 0


def _text_lines(f: BinaryIO) -> Iterator[str]:
    """The lines of a UTF-8 file as ``Path.read_text(encoding="utf-8-sig").splitlines()``
    gives them (``\\r\\n``, ``\\r`` and the other line breaks of str.splitlines), one at a time."""
    first = True
    for chunk in f:  # split at b"\n", which never occurs inside a UTF-8 sequence
        text = chunk.decode("utf-8-sig" if first else "utf-8")
        first = False
        yield from text.splitlines()


def read_ncu_report(path: str | os.PathLike) -> list[KernelCounters]:
    """Read a ``.ncu-rep`` report through NVIDIA's ``ncu_report`` module (package ``ncu-report``).

    Raises:
        DeviceUnavailableError: ``ncu_report`` is not installed (the message gives the
            install line and the CSV-export alternative).
        ConfigError: the file is missing or cannot be loaded.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"file not found: {str(p)!r}")
    try:
        import ncu_report  # type: ignore[import-not-found]
    except ImportError as exc:
        raise DeviceUnavailableError(
            f"reading {p.name} needs NVIDIA's ncu_report module: `pip install ncu-report` "
            "(matching your Nsight Compute version), or export it to CSV first: "
            f"`ncu --import {p} --csv --page raw --print-units base > {p.stem}.csv`"
        ) from exc
    try:
        context = ncu_report.load_report(str(p))
    except Exception as exc:  # the module raises its own types
        raise ConfigError(f"cannot load Nsight Compute report {str(p)!r}: {exc}") from exc
    records = []
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            metrics: dict[str, tuple[float | str, str]] = {}
            for name in action.metric_names():
                value, unit = _report_metric(action.metric_by_name(name))
                if value is not None:
                    metrics[name] = (value, unit)
            cc = None
            major = metrics.get("device__attribute_compute_capability_major")
            minor = metrics.get("device__attribute_compute_capability_minor")
            if major and minor and isinstance(major[0], float) and isinstance(minor[0], float):
                cc = f"{int(major[0])}.{int(minor[0])}"
            records.append(
                KernelCounters(
                    len(records),
                    str(action.name()),
                    metrics,
                    nvtx_ranges=_report_nvtx(action),
                    cc=cc,
                    source=f"{p} (ncu-rep)",
                )
            )
    return records


def _report_metric(metric: Any) -> tuple[float | str | None, str]:
    unit_fn = getattr(metric, "unit", None)
    unit = str(unit_fn()) if callable(unit_fn) else ""
    kind = str(getattr(metric, "kind", lambda: "")()).upper()
    try:
        if "STRING" in kind:
            return str(metric.as_string()), unit
        value = metric.as_double()
    except Exception:
        return None, unit
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None, unit
    return float(value), unit


def _report_nvtx(action: Any) -> tuple[str, ...]:
    try:
        state = action.nvtx_state()
        names: list[str] = []
        for domain_id in state.domains():
            names.extend(str(n) for n in state.domain_by_id(domain_id).push_pop_ranges())
        return tuple(names)
    except Exception:
        return ()


def load_counters(
    path: str | os.PathLike, progress: Callable[[int, int], None] | None = None
) -> list[KernelCounters]:
    """Read counters from an ncu CSV (any suffix) or a ``.ncu-rep`` report.

    ``progress(lines done, lines in all)`` is called while a CSV is parsed (see
    :func:`parse_ncu_csv`).
    """
    p = Path(path)
    if p.suffix == ".ncu-rep":
        return read_ncu_report(p)
    return read_ncu_csv(p, progress=progress)
