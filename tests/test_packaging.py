"""The distribution: the wheel built from pyproject.toml holds every data file the package reads,
declares the ``llm-planner`` command, takes its version from ``planner.__version__``, pins what
requirements.txt pins, and runs ``plan`` from the wheel's files alone, outside the repository.

The wheel is built once, offline, by the build backend pyproject.toml names (setuptools), from a
copy of the sources in a temporary folder, so no ``build/`` or ``*.egg-info`` lands in the checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import planner

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
DIST_NAME = "llm-capacity-planner"
BUILD_TIMEOUT_S = 180


def source_data_files() -> set[str]:
    """Every non-Python file under planner/ (wheel-style paths), caches left out."""
    return {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "planner").rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of the sources, built with the backend of [build-system]."""
    backend = PYPROJECT["build-system"]["build-backend"]
    module = backend.split(":")[0]
    try:
        __import__(module)
    except ImportError:
        pytest.skip(f"the build backend {backend!r} ({PYPROJECT['build-system']['requires']}) is not installed")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in ("planner", "hardware_profiles"):  # the cards sit at the top; the wheel maps them into planner/
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    code = f"import {module} as b; print(b.build_wheel({str(out)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=src, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def names(wheel) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return set(z.namelist())


def dist_info_file(wheel: Path, names: set[str], leaf: str) -> str:
    (member,) = [n for n in names if n.endswith(f".dist-info/{leaf}")]
    with zipfile.ZipFile(wheel) as z:
        return z.read(member).decode("utf-8")


def test_wheel_holds_the_catalog_engines_and_hardware_profiles(names):
    assert "planner/model/catalog/index.yaml" in names
    engines = {p.name for p in (ROOT / "planner" / "engines").glob("*.yaml")}
    assert engines and {f"planner/engines/{e}" for e in engines} <= names
    cards = {p.name for p in (ROOT / "hardware_profiles").glob("*.yaml")}
    assert "h100-sxm.yaml" in cards
    assert {f"planner/hardware_profiles/{c}" for c in cards} | {"planner/hardware_profiles/README.md"} <= names


def test_wheel_holds_every_data_file_of_the_package(names):
    """A file the package reads at run time lives under planner/; none may be left out of the wheel."""
    missing = sorted(source_data_files() - names)
    assert not missing, f"not in the wheel (add them to [tool.setuptools.package-data]): {missing}"


def test_wheel_holds_every_module_of_the_package(names):
    """pyproject.toml lists the packages (hardware_profiles/ is mapped in): none may be left out."""
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "planner").rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(modules - names)
    assert not missing, f"modules not in the wheel (add their package to [tool.setuptools] packages): {missing}"


def test_wheel_holds_only_the_planner_package(names):
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"planner"}, f"top-level entries besides planner: {sorted(tops - {'planner'})}"


def test_console_script_and_version_are_declared(wheel, names):
    entry_points = dist_info_file(wheel, names, "entry_points.txt")
    assert re.search(r"^\[console_scripts\]\s*^llm-planner = planner\.cli:main$", entry_points, re.M), entry_points
    from planner.cli import main

    assert callable(main)
    metadata = dist_info_file(wheel, names, "METADATA")
    assert f"\nName: {DIST_NAME}\n" in metadata
    assert f"\nVersion: {planner.__version__}\n" in metadata
    assert PYPROJECT["project"]["dynamic"] == ["version"], "the version lives in planner/__init__.py only"


def requirement_pins() -> set[str]:
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return {line.split("#")[0].strip() for line in lines if line.strip() and not line.lstrip().startswith(("#", "-"))}


def test_pins_agree_with_requirements_txt():
    project = PYPROJECT["project"]
    declared = set(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared |= {d for d in extra if not d.startswith(DIST_NAME)}
    assert all("==" in d for d in declared), f"not pinned exactly: {sorted(d for d in declared if '==' not in d)}"
    assert declared == requirement_pins(), (
        f"only in pyproject.toml: {sorted(declared - requirement_pins())}; "
        f"only in requirements.txt: {sorted(requirement_pins() - declared)}"
    )


def test_plan_runs_from_the_wheel_alone_outside_the_repository(wheel, tmp_path):
    """Unpacked wheel first on the path, working folder outside the checkout: the data must come along."""
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = (
        "import planner, sys; from planner.cli import main; "
        "print(planner.__file__, file=sys.stderr); "
        "sys.exit(main(['plan', 'meta-llama/Llama-3.1-8B', '--format', 'json']))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=away, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    assert Path(done.stderr.strip().splitlines()[0]).is_relative_to(site), done.stderr
    plan = json.loads(done.stdout)
    assert plan["model"] == "meta-llama/Llama-3.1-8B" and plan["gpu_id"] == "h100-sxm" and plan["fits"] is True
