"""Compatibility re-export for ``roofprof.selftest``: import these from ``roofprof.devices.cuda``.

The CUDA op implementations moved to the ``roofprof.devices.cuda`` package; this module goes
away once ``selftest`` imports the package's face.
"""

from roofprof.devices.cuda import CupyBuffers, PreparedGemm, gemv_prepared, numba_cuda_reason

__all__ = ["CupyBuffers", "PreparedGemm", "gemv_prepared", "numba_cuda_reason"]
