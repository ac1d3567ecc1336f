"""Published real measurements: the corpus of ``data/published/`` as cited records.

Two files hold the rows of the shared reference ``published_measurements.md`` (gaps in the
row numbers are rows held back from the shared copy):

* ``end_to_end.json``: LLM inference figures (TTFT, TPOT, tokens/s) with their model,
  precisions (weights, compute, KV cache), GPU and count, TP, engine, batch, lengths, the
  caveats as ``flags`` and, for rows roofprof does not model, the reason in ``skip``;
* ``microbenchmarks.json``: streaming-bandwidth, GEMM and interconnect ceilings per GPU;
  ``use_as_ceiling`` marks the figure :func:`published_roofline` uses.

Every record names its source (``S1``...: repository@commit and path, or URL, in the
file's ``sources``) and quotes the row it was taken from. Figures with ``derived: true``
are plain arithmetic on printed values (``derived_from`` gives the inputs).

>>> rows = load_end_to_end()
>>> rows[0].id, rows[0].engine_profile, round(rows[0].figure("tpot_s"), 5)
('D01', 'gpt-fast', 0.00953)
>>> published_roofline("h100-sxm").memory_ceiling().value
2970000000000.0
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofprof._resources import data_root
from roofprof.errors import ConfigError
from roofprof.roofline import Ceiling, Roofline

__all__ = [
    "CeilingRecord",
    "PublishedRow",
    "ceiling_gpus",
    "load_end_to_end",
    "load_microbenchmarks",
    "published_roofline",
    "published_sources",
]

_FILES = ("end_to_end.json", "microbenchmarks.json")
_ROW_REQUIRED = (
    "id",
    "model",
    "gpu",
    "engine",
    "engine_profile",
    "phase",
    "figures",
    "source",
    "quote",
    "flags",
)
_CEILING_REQUIRED = ("id", "gpu", "kind", "unit", "source", "quote", "use_as_ceiling")


@dataclass(frozen=True)
class PublishedRow:
    """One end-to-end row (see ``data/published/end_to_end.json``).

    ``figures`` are ``{"metric", "value", "unit", "derived"[, "derived_from"]}`` mappings;
    ``skip`` is why roofprof does not model the row (``None``: it does).
    """

    id: str
    model: str
    model_id: str | None
    gpu: str
    gpu_id: str | None
    gpu_count: int
    tp: int
    engine: str
    engine_version: str
    engine_profile: str
    phase: str
    weights: str | None
    dtype: str | None
    kv_dtype: str | None
    batch: int | None
    prompt_tokens: int | None
    output_tokens: int | None
    decode_context_tokens: int | None
    figures: tuple[Mapping[str, Any], ...]
    flags: tuple[str, ...]
    skip: str | None
    source: str
    quote: str
    notes: str = ""
    batching: str | None = (
        None  # batched rows: "static" or "continuous" (roofprof.prediction.serving)
    )
    tokens_counted: str | None = None  # batched rows: "output" or "total" (input + output) tokens

    def figure(self, metric: str) -> float | None:
        """The value of ``metric`` (SI units), or None when the row does not give it."""
        for f in self.figures:
            if f.get("metric") == metric:
                return f.get("value")
        return None

    def is_derived(self, metric: str) -> bool:
        """Whether ``metric`` was derived (arithmetic on printed values) rather than printed."""
        return any(f.get("metric") == metric and f.get("derived") for f in self.figures)

    def cite(self) -> str:
        """``row · source`` as every report prints it, e.g.
        ``D01 · S5 gpt-fast@32971d3 README.md``."""
        return f"{self.id} · {_cite_source(self.source)}"


@dataclass(frozen=True)
class CeilingRecord:
    """One microbenchmark row: ``ceiling`` in B/s or FLOP/s (None for non-roofline rows)."""

    id: str
    gpu: str
    gpu_id: str | None
    kind: str
    ceiling: float | None
    unit: str
    dtype: str | None
    level: str | None
    values: Mapping[str, float]
    tool: str
    conditions: str
    flags: tuple[str, ...]
    use_as_ceiling: bool
    source: str
    quote: str
    notes: str = ""


def _cite_source(key: str) -> str:
    s = published_sources().get(key, {})
    if "repo" in s:
        return f"{key} {s['repo']}@{s['commit']} {s['path']}"
    return f"{key} {s.get('url', '?')}"


def _folder() -> Path:
    return data_root() / "published"


@functools.lru_cache(maxsize=4)
def _read(name: str, folder: str | None = None) -> Mapping[str, Any]:
    path = Path(folder) / name if folder else _folder() / name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the published corpus ({exc})") from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("rows"), list):
        raise ConfigError(f"{path}: expected an object with a 'rows' list")
    return data


def published_sources(folder: str | None = None) -> Mapping[str, Mapping[str, str]]:
    """Source id → ``{"repo", "commit", "path"}`` or ``{"url"}`` (both files share them)."""
    return _read(_FILES[0], folder).get("sources", {})


def _check(
    path: str, row: Any, index: int, required: tuple[str, ...], sources: Mapping[str, Any]
) -> None:
    label = row.get("id", f"#{index}") if isinstance(row, Mapping) else f"#{index}"
    if not isinstance(row, Mapping):
        raise ConfigError(f"{path}: row {label} is not an object")
    missing = [k for k in required if k not in row or row[k] in (None, "") and k not in ("skip",)]
    if missing:
        raise ConfigError(f"{path}: row {label} misses required field(s) {', '.join(missing)}")
    if row["source"] not in sources:
        raise ConfigError(f"{path}: row {label} cites unknown source {row['source']!r}")


def load_end_to_end(folder: str | None = None) -> tuple[PublishedRow, ...]:
    """Every end-to-end row of ``end_to_end.json`` (in ``folder``, default the shipped data).

    Raises:
        ConfigError: the file is unreadable, or a row misses a required field or cites an
            unknown source (the message names the file and the row).
    """
    data = _read(_FILES[0], folder)
    path = str(Path(folder or _folder()) / _FILES[0])
    sources = data.get("sources", {})
    rows = []
    for i, r in enumerate(data["rows"]):
        _check(path, r, i, _ROW_REQUIRED, sources)
        for f in r["figures"]:
            if not isinstance(f, Mapping) or "metric" not in f or "derived" not in f:
                raise ConfigError(
                    f"{path}: row {r['id']} has a figure without 'metric' and 'derived'"
                )
        rows.append(
            PublishedRow(
                id=r["id"],
                model=r["model"],
                model_id=r.get("model_id"),
                gpu=r["gpu"],
                gpu_id=r.get("gpu_id"),
                gpu_count=int(r.get("gpu_count") or 1),
                tp=int(r.get("tp") or 1),
                engine=r["engine"],
                engine_version=r.get("engine_version", ""),
                engine_profile=r["engine_profile"],
                phase=r["phase"],
                weights=r.get("weights"),
                dtype=r.get("dtype"),
                kv_dtype=r.get("kv_dtype"),
                batch=r.get("batch"),
                prompt_tokens=r.get("prompt_tokens"),
                output_tokens=r.get("output_tokens"),
                decode_context_tokens=r.get("decode_context_tokens"),
                figures=tuple(r["figures"]),
                flags=tuple(r["flags"]),
                skip=r.get("skip"),
                source=r["source"],
                quote=r["quote"],
                notes=r.get("notes", ""),
                batching=r.get("batching"),
                tokens_counted=r.get("tokens_counted"),
            )
        )
    return tuple(rows)


def load_microbenchmarks(folder: str | None = None) -> tuple[CeilingRecord, ...]:
    """Every microbenchmark row of ``microbenchmarks.json``.

    Raises:
        ConfigError: as :func:`load_end_to_end`.
    """
    data = _read(_FILES[1], folder)
    path = str(Path(folder or _folder()) / _FILES[1])
    sources = data.get("sources", {})
    out = []
    for i, r in enumerate(data["rows"]):
        _check(path, r, i, _CEILING_REQUIRED, sources)
        if r["use_as_ceiling"] and not (r.get("gpu_id") and r.get("ceiling")):
            raise ConfigError(
                f"{path}: row {r['id']} is used as a ceiling but has no gpu_id or ceiling value"
            )
        out.append(
            CeilingRecord(
                id=r["id"],
                gpu=r["gpu"],
                gpu_id=r.get("gpu_id"),
                kind=r["kind"],
                ceiling=r.get("ceiling"),
                unit=r["unit"],
                dtype=r.get("dtype"),
                level=r.get("level"),
                values=r.get("values") or {},
                tool=r.get("tool", ""),
                conditions=r.get("conditions", ""),
                flags=tuple(r.get("flags", ())),
                use_as_ceiling=bool(r["use_as_ceiling"]),
                source=r["source"],
                quote=r["quote"],
                notes=r.get("notes", ""),
            )
        )
    return tuple(out)


def ceiling_gpus() -> tuple[str, ...]:
    """GPU ids (``data/gpus.json``) with at least one published ceiling, sorted."""
    return tuple(
        sorted({c.gpu_id for c in load_microbenchmarks() if c.use_as_ceiling and c.gpu_id})
    )


def published_roofline(gpu: str, *, fill_from_spec: bool = True) -> Roofline:
    """A roofline from the published ceilings of ``gpu`` (an id or alias of ``data/gpus.json``).

    Each ceiling has ``source="measured"`` and a ``note`` citing its row
    (``T1-02 · S2 Azure/AI-benchmarking-guide@8fd0c6e ...``). With ``fill_from_spec``, a
    dtype or the memory level with no published figure takes the datasheet value
    (``source="spec"``, noted as such), so every dtype the GPU has can be predicted.

    Raises:
        UnknownNameError: unknown GPU.
        ConfigError: the GPU has no published ceilings (the message names those that do).
    """
    from roofprof.specs import load_gpu

    spec = load_gpu(gpu)
    chosen = [c for c in load_microbenchmarks() if c.use_as_ceiling and c.gpu_id == spec.id]
    if not chosen:
        raise ConfigError(
            f"no published ceilings for {spec.id}; GPUs with published ceilings: "
            f"{', '.join(ceiling_gpus())} (or give a measured --roofline)"
        )
    ceilings = []
    for c in chosen:
        cite = f"{c.id} · {_cite_source(c.source)}: {c.quote}" + (
            f" [{', '.join(c.flags)}]" if c.flags else ""
        )
        if c.kind == "memory":
            ceilings.append(
                Ceiling(
                    f"{c.tool} ({c.id})",
                    "memory",
                    float(c.ceiling),
                    level=c.level or "dram",
                    source="measured",
                    note=f"published: {cite}",
                )
            )
        elif c.kind == "compute":
            ceilings.append(
                Ceiling(
                    f"{c.dtype} {c.tool} ({c.id})",
                    "compute",
                    float(c.ceiling),
                    dtype=c.dtype,
                    source="measured",
                    note=f"published: {cite}",
                )
            )
    if fill_from_spec:
        have_dtypes = {c.dtype for c in ceilings if c.kind == "compute"}
        spec_roof = Roofline.from_spec(spec)
        for c in spec_roof.ceilings:
            if (c.kind == "compute" and c.dtype not in have_dtypes) or (
                c.kind == "memory" and not any(x.kind == "memory" for x in ceilings)
            ):
                ceilings.append(
                    Ceiling(**{**c.__dict__, "note": "no published figure: datasheet value"})
                )
    return Roofline(device=f"{spec.name} (published ceilings)", ceilings=tuple(ceilings))
