"""kernels/numba_cuda.py on the oldest numba-cuda that pyproject.toml allows (no GPU needed).

numba-cuda 0.20.x has no scalar types in ``numba.cuda.types`` (they arrived in 0.21 with the
vendored type system), so the module falls back to ``numba.core.types`` there. This test reads
the floor from ``pyproject.toml``, installs exactly that numba-cuda with a numba/llvmlite/numpy
it supports into ``~/.cache/roofprof-test`` (``pip install --target``, tests/pip_cache.py) and,
in subprocesses that put that folder first on the path:

* under the simulator (``NUMBA_ENABLE_CUDASIM=1``) imports the module and runs a few registry
  kernels on tiny shapes against their references;
* without the simulator compiles every registry kernel to PTX for sm_80 with that numba-cuda's
  real compiler (the typing of the fallback types), when NVVM is available here.

Skips when PyPI is unreachable. About 10-20 s with a warm cache.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pip_cache import cached_install  # noqa: E402

# slow: pinned installs; the first run downloads them (minutes on a cold cache)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[1]
MODULE = REPO / "kernels" / "numba_cuda.py"
# Companions of the floor: the numba/llvmlite pair numba-cuda 0.20 works with (numba 0.68 dropped
# internals it imports) and a numpy that numba accepts (Python 3.10-3.13 wheels).
COMPANIONS = ("numba==0.62.1", "llvmlite==0.45.1", "numpy==2.2.6")
SUBPROCESS_TIMEOUT_S = 240


def declared_floor() -> str:
    """The ``numba-cuda[...]>=X`` floor of pyproject.toml (the same in every extra)."""
    text = (REPO / "pyproject.toml").read_text()
    floors = set(re.findall(r'"numba-cuda\[cu1\d\]>=([0-9.]+)"', text))
    assert len(floors) == 1, f"numba-cuda floors differ between extras: {floors}"
    return floors.pop()


_PRELUDE = textwrap.dedent(
    r"""
    import importlib.util, json, site, sys
    target, module_path, floor = sys.argv[1], sys.argv[2], sys.argv[3]
    site.addsitedir(target)  # the numba.cuda -> numba_cuda redirector (.pth) of that release
    import numba_cuda
    from numba import cuda
    assert numba_cuda.__version__ == floor, (numba_cuda.__version__, floor)
    assert cuda.__file__.startswith(target), cuda.__file__
    # the kernels folder as a package of its own (its modules import each other relatively,
    # and nothing of roofprof), so the floor release is the numba-cuda they run on
    import importlib, os
    folder = os.path.dirname(module_path)
    spec = importlib.util.spec_from_file_location(
        "kernels_floor", os.path.join(folder, "__init__.py"),
        submodule_search_locations=[folder])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    nk = importlib.import_module("kernels_floor." + os.path.basename(module_path)[:-3])
    """
)

_SIM_SCRIPT = _PRELUDE + textwrap.dedent(
    r"""
    import numpy as np
    assert nk.simulator_active()
    rng = np.random.default_rng(7)
    checked = []
    for name, shape in [("gemv_fp16", {"M": 2, "N": 3, "K": 70}),
                        ("gemv_fp32", {"M": 1, "N": 2, "K": 33}),
                        ("read_fp32", {"n": 300}), ("copy_fp32", {"n": 77}),
                        ("fma_chain_fp64", {"threads": 40, "iters": 3}),
                        ("intensity_sweep_fp32", {"n": 50, "k": 5})]:
        ks = nk.KERNELS[name]
        inputs = ks.make_inputs(shape, rng)
        start = 3.0 if ks.accumulates else np.nan
        out = np.full(ks.out_shape(shape), start, ks.out_np_dtype)
        grid, block = ks.launch(shape, 1)
        ks.kernel_for(shape, 1)[grid, block](*ks.call_args(inputs, out))
        expected = np.asarray(ks.reference(inputs, shape), np.float64) + (
            start if ks.accumulates else 0.0)
        rtol, atol = ks.tolerance(shape)
        err = np.abs(out.astype(np.float64) - expected)
        assert np.all(err <= atol + rtol * np.abs(expected)), (name, float(err.max()))
        checked.append(name)
    print(json.dumps({"ok": True, "checked": checked}))
    """
)

_PTX_SCRIPT = _PRELUDE + textwrap.dedent(
    r"""
    assert not nk.simulator_active()
    from numba.core.types import float32
    try:
        cuda.compile_ptx(lambda x: None, (float32[::1],), cc=(8, 0))
    except Exception as exc:  # no NVVM here
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}))
        sys.exit(0)
    targets = {}
    for name, ks in nk.KERNELS.items():
        ptx, _ = cuda.compile_ptx(ks.kernel.py_func, ks.signature, cc=(8, 0))
        targets[name] = ptx.count(".entry")
    print(json.dumps({"ok": True, "entries": targets}))
    """
)


@pytest.fixture(scope="module")
def floor_env() -> tuple[Path, str]:
    floor = declared_floor()
    floor += ".0" * (2 - floor.count("."))  # "0.20" -> "0.20.0", the release pip picks
    folder, why = cached_install(f"numba-cuda=={floor}", *COMPANIONS)
    if folder is None:
        pytest.skip(why)
    return folder, floor


def _run(script: str, folder: Path, floor: str, *, simulator: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["PYTHONPATH"] = str(folder)
    env["NUMBA_CUDA_USE_NVIDIA_BINDING"] = "0"  # ctypes driver/NVVM bindings: no cuda-bindings
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(folder), str(MODULE), floor],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"numba-cuda {floor}:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_floor_is_declared_consistently():
    text = (REPO / "pyproject.toml").read_text()
    floor = declared_floor()
    assert text.count(f'numba-cuda[cu12]>={floor}"') == 2  # the cuda12 and test extras
    assert text.count(f'numba-cuda[cu13]>={floor}"') == 1


def test_module_imports_and_runs_under_the_floor_simulator(floor_env):
    folder, floor = floor_env
    report = _run(_SIM_SCRIPT, folder, floor, simulator=True)
    assert report["ok"] and len(report["checked"]) == 6


def test_every_kernel_compiles_to_ptx_under_the_floor(floor_env):
    folder, floor = floor_env
    report = _run(_PTX_SCRIPT, folder, floor, simulator=False)
    if not report["ok"]:
        pytest.skip(f"numba-cuda {floor} cannot compile here (no NVVM?): {report['error']}")
    assert report["entries"] and all(n >= 1 for n in report["entries"].values()), report
