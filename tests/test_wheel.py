"""The package as `pip install .` ships it: a wheel built from this tree holds every module and resource, and the
installed (non-editable) copy imports every module and finds its data. An editable install (what the tests run
on) hides a package or data file missing from the wheel; these tests do not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA_PATTERNS = ("*.json", "presets/*.json", "icons/*.svg", "icons/*.png", "models/*.safetensors", "models/*.json")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out, tree = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("tree")
    # the tracked files only, as a fresh clone has them: a checkout's stale build/ folder would add old modules
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(tree), "-w", str(out), "--no-deps", "-q"],
                   check=True, timeout=600, cwd=out)
    return next(out.glob("attnviz-*.whl"))


def source_files() -> set[str]:
    """What the wheel must hold, from the source tree: every module, and the data the package reads."""
    package = ROOT / "attnviz"
    modules = {p for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    data = {p for pattern in DATA_PATTERNS for p in (package / "resources").glob(pattern)}
    return {p.relative_to(ROOT).as_posix() for p in modules | data}


def test_the_wheel_holds_every_module_and_resource(wheel):
    expected = source_files()
    assert {"attnviz/export/__init__.py", "attnviz/resources/presets/seed000-demo.json",
            "attnviz/resources/models/toy-induction.safetensors", "attnviz/resources/icons/attnviz.png"} <= expected
    names = set(zipfile.ZipFile(wheel).namelist())
    assert sorted(expected - names) == []


def test_the_installed_package_imports_every_module_and_reads_its_data(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target", str(site),
                    str(wheel)], check=True, timeout=600)
    script = (
        # an editable install of this checkout in the same environment would serve any module the wheel lacks
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n"
        "import importlib, pkgutil, attnviz\n"
        f"assert attnviz.__file__.startswith({str(site)!r}), attnviz.__file__\n"
        "names = [m.name for m in pkgutil.walk_packages(attnviz.__path__, 'attnviz.') if '__main__' not in m.name]\n"
        "for name in names: importlib.import_module(name)\n"
        "from attnviz.core import list_presets, load_preset\n"
        "from attnviz.toys import load_toy\n"
        "assert 'seed000-demo' in list_presets(); load_preset('seed000-demo'); load_toy('toy-induction')\n"
        "from attnviz import colormaps\n"
        "assert 'viridis' in colormaps.names()\n"
        "print(len(names))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) > 100  # every module, the export package's among them
