"""The built wheel ships kernels/ and data/ and runs `roofprof predict` outside the repo."""

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_wheel_installs_and_predicts(tmp_path, repo_root):
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(repo_root),
        ],
        check=True,
    )
    wheel = next(dist.glob("roofprof-*.whl"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    # the dependencies come from the interpreter running the tests (a virtualenv or not), as
    # plain path entries: its editable roofprof finder is not loaded, the wheel's roofprof is
    site_dir = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site_dir) / "_test_parent.pth").write_text("\n".join(sorted(ours)) + "\n")
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
        check=True,
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run(
        [str(env_dir / "bin" / "roofprof"), "predict", "--gpu", "h100", "--format", "json"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["decode"]["tokens_per_second"] > 100
    where = subprocess.run(
        [
            str(py),
            "-c",
            "import roofprof.kernels, roofprof.data, importlib.resources as r;"
            "print(roofprof.__file__); "
            "print(r.files('roofprof.data').joinpath('gpus.json').is_file())",
        ],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(env_dir) in where.splitlines()[0] and where.splitlines()[1] == "True"
