"""Device code: the kernels roofprof measures, with their references and FLOP/byte models.

Loaded module by module (``roofprof._resources.kernels_module(name)``), never as a whole: the
package itself exports nothing and imports nothing from roofprof.

* ``cpu``: numba ``@njit`` CPU kernels.
* ``cuda_models``: host models of the CUDA C sources in ``cuda/`` (re-exports
  ``cuda_sources``, ``cuda_launch``, ``cuda_gemv``, ``cuda_gemm``, ``cuda_probes`` and
  ``cuda_probe_replays``).
* ``numba_cuda``: Numba-CUDA kernels and their registry (re-exports ``numba_support``,
  ``numba_matmul``, ``numba_probes`` and ``numba_registry``).

It is ``roofprof.kernels``. Imported as a top-level ``kernels`` (Python puts the current
folder first on ``sys.path`` for ``python -m`` and ``python -c``, so a checkout's root
shadows every installed package of that name: Hugging Face's ``kernels``, which
transformers imports whenever it is installed), it hands the name to the installed package,
or says there is none.
"""

__all__: list[str] = []


def _step_aside() -> None:
    """Replace this module in ``sys.modules`` with the next ``kernels`` on ``sys.path`` (the
    import statement then returns that one), or raise ModuleNotFoundError."""
    import importlib.machinery
    import importlib.util
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent.parent
    others = [p for p in sys.path if Path(p or ".").resolve() != here]
    spec = importlib.machinery.PathFinder.find_spec("kernels", others)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError("No module named 'kernels'", name="kernels")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernels"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop("kernels", None)
        raise


if __name__ == "kernels":
    _step_aside()
