"""Test configuration.

The numba-cuda simulator must be enabled before numba is first imported, so that every
`numba.cuda` kernel runs on the CPU here (CI has no GPU). Tests that need a real GPU are
marked ``gpu`` and skipped unless one is present (``roofprof selftest`` runs them).
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def _real_gpu_present() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and not os.environ.get("ROOFPROF_GPU_TESTS"):
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _real_gpu_present():
        return
    skip = pytest.mark.skip(reason="needs a real NVIDIA GPU (run `roofprof selftest` on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def repo_root() -> Path:
    return REPO
