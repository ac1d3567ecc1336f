"""The repository's ``kernels/`` folder is ``roofprof.kernels``; from a checkout's root it must
not stand in for an installed top-level ``kernels`` (Hugging Face's, which transformers imports
whenever it is installed)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> subprocess.CompletedProcess:
    # -c puts the current folder (here the checkout's root) first on sys.path, as users' shells do
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_from_the_checkout_root_kernels_is_the_installed_package_or_none():
    r = _run("import kernels\nprint(kernels.__file__)\n")
    installed = _run(
        "import importlib.metadata as m\n"
        "try:\n    print(m.version('kernels'))\nexcept m.PackageNotFoundError:\n    print('')\n"
    ).stdout.strip()
    if installed:
        assert r.returncode == 0, r.stderr
        assert Path(r.stdout.strip()).resolve().parent != ROOT / "kernels"
    else:
        assert r.returncode != 0 and "No module named 'kernels'" in r.stderr


def test_without_an_installed_kernels_the_folder_says_there_is_none():
    site = [p for p in sys.path if "site-packages" in p or "dist-packages" in p]
    r = _run(
        "import sys\n"
        f"sys.path[:] = [p for p in sys.path if p not in {site!r}]\n"
        "try:\n    import kernels\nexcept ModuleNotFoundError as e:\n"
        "    print('missing', e.name, 'kernels' in sys.modules)\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "missing kernels False"


def test_roofprof_kernels_is_the_folder():
    r = _run(
        "import roofprof.kernels as k\nfrom roofprof.kernels import cuda_models\n"
        "print(k.__name__, cuda_models.__name__)\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["roofprof.kernels", "roofprof.kernels.cuda_models"]
