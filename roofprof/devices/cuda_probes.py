"""Compatibility re-export for ``roofprof.selftest``: import these from ``roofprof.devices.cuda``.

The CUDA probe catalogue moved to the ``roofprof.devices.cuda`` package; this module goes
away once ``selftest`` imports the package's face.
"""

from roofprof.devices.cuda import launch_latency, skipped_probes

__all__ = ["launch_latency", "skipped_probes"]
