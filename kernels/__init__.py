"""Device code: the kernels roofprof measures, with their references and FLOP/byte models.

Loaded module by module (``roofprof._resources.kernels_module(name)``), never as a whole: the
package itself exports nothing and imports nothing from roofprof.

* ``cpu``: numba ``@njit`` CPU kernels.
* ``cuda_models``: host models of the CUDA C sources in ``cuda/`` (re-exports
  ``cuda_sources``, ``cuda_launch``, ``cuda_gemv``, ``cuda_gemm``, ``cuda_probes`` and
  ``cuda_probe_replays``).
* ``numba_cuda``: Numba-CUDA kernels and their registry (re-exports ``numba_support``,
  ``numba_matmul``, ``numba_probes`` and ``numba_registry``).
"""

__all__: list[str] = []
