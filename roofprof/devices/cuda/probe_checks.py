"""How a GPU probe is checked before it is timed: the poison/flag protocol of ``probes.cu``.

A probe's ``out`` buffer holds :data:`POISON` in every word; the host replays each thread's
folded result in numpy (the replays of ``kernels/cuda_models.py``: :func:`read_probe_folds`,
:func:`smem_probe_fold`, :func:`fma_probe_fold`, :func:`intensity_probe_folds`) and passes one
fold as ``flag``, so exactly the threads with that value must write it (:func:`flag_check`);
when timing the flag is :data:`NEVER`. :func:`merge_checks` folds several partial checks.

>>> import numpy as np
>>> flag_check(np.array([7, POISON, 7]), np.array([7, 3, 7]), 7, "demo").ok
True
"""

from __future__ import annotations

import numpy as np

from roofprof._resources import kernels_module
from roofprof.devices.base import CheckResult

__all__ = [
    "CHECK_SEED",
    "MASK32",
    "NEVER",
    "POISON",
    "flag_check",
    "fma_probe_fold",
    "hash32",
    "intensity_probe_folds",
    "merge_checks",
    "read_probe_folds",
    "round_to_precision",
    "smem_probe_fold",
]

#: The replays of probes.cu live beside the gemv/gemm replays in ``kernels/cuda_models.py``.
_cm = kernels_module("cuda_models")
hash32 = _cm.hash32
read_probe_folds = _cm.read_probe_folds
smem_probe_fold = _cm.smem_probe_fold
fma_probe_fold = _cm.fma_probe_fold
intensity_probe_folds = _cm.intensity_probe_folds
round_to_precision = _cm.round_to_precision
MASK32 = _cm.MASK32

POISON = 0xA5A5A5A5
"""What a probe's ``out`` words hold before a check (never a fold the host picks as flag)."""
NEVER = 0xFFFFFFFF
"""The ``flag`` passed when timing: a thread writes only when its fold equals it."""
#: Seed of the random stream the probe checks draw from.
CHECK_SEED = 20240611


def flag_check(
    out_words: np.ndarray, expected_folds: np.ndarray, flag: int, note: str
) -> CheckResult:
    """Compare a probe's ``out`` after a launch with ``flag`` against the host's folds.

    Every thread whose fold equals ``flag`` must have written it; every other word must
    still hold :data:`POISON`. ``max_abs_error`` counts the wrong words.
    """
    out = np.asarray(out_words, dtype=np.uint32)
    folds = np.asarray(expected_folds, dtype=np.uint32)
    expected = np.where(folds == np.uint32(flag), np.uint32(flag), np.uint32(POISON))
    bad = int(np.count_nonzero(out != expected))
    writers = int(np.count_nonzero(folds == np.uint32(flag)))
    return CheckResult(
        bad == 0,
        float(bad),
        float(bad) / max(1, out.size),
        0.0,
        f"{note}; flag 0x{flag:08x}: {writers} thread(s) must write, {bad} word(s) wrong",
    )


def merge_checks(results: list[CheckResult], note: str) -> CheckResult:
    """One :class:`CheckResult` for several partial checks (ok when all are)."""
    ok = all(r.ok for r in results)
    worst = max(results, key=lambda r: (not r.ok, r.max_rel_error))
    return CheckResult(
        ok,
        worst.max_abs_error,
        worst.max_rel_error,
        worst.tolerance,
        f"{note}: " + "; ".join(r.note for r in results),
    )
