"""Charts (matplotlib, imported lazily with the Agg backend): one module per chart family.

- :mod:`roofprof.plots.roofline`: rooflines with ops/kernels placed on them.
- :mod:`roofprof.plots.sweeps`: working-set staircase and intensity sweep.
- :mod:`roofprof.plots.hierarchical`: the counters' L1/L2/DRAM hierarchical roofline.
- :mod:`roofprof.plots.report`: the charts of the ``roofprof run`` HTML report.

Every chart ends in :func:`save`: rendered once to bytes, written whole or not at all.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

__all__ = ["pyplot", "save"]


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: str | os.PathLike | None = None) -> bytes:
    """Render ``fig`` (PNG at zlib level 1, or the format of ``path``'s suffix), close it,
    return the bytes.

    With ``path``, the bytes are also written atomically (temp file + rename, the usual file
    mode), so a chart on disk is never half written. The figure is closed in every case.

    Raises:
        ConfigError: ``path``'s folder cannot be created or written.

    >>> plt = pyplot()
    >>> fig, ax = plt.subplots()
    >>> save(fig)[:4]
    b'\\x89PNG'
    """
    from roofprof.results import write_bytes_atomic

    fmt = (Path(path).suffix.lstrip(".") if path is not None else "") or "png"
    buf = io.BytesIO()
    # fastest zlib level: a report's six charts encode in about half the time, ~7 % larger
    options = {"pil_kwargs": {"compress_level": 1}} if fmt == "png" else {}
    try:
        fig.savefig(buf, format=fmt, **options)
    finally:
        pyplot().close(fig)
    data = buf.getvalue()
    if path is not None:
        write_bytes_atomic(path, data)
    return data
