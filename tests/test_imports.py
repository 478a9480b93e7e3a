"""The planner core imports neither streamlit nor torch (only planner.bench may import torch, lazily)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import planner

ROOT = Path(__file__).resolve().parent.parent


def core_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(planner.__path__, "planner."):
        if info.name.startswith("planner.bench"):
            continue
        names.append(info.name)
    return names


def test_core_imports_neither_streamlit_nor_torch():
    modules = core_modules()
    assert "planner.estimate.memory" in modules and "planner.model.families" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('streamlit', 'torch'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"core pulled in: {out.stdout.strip()}"


def test_floors_do_not_import_upwards():
    """DESIGN.md floors: model/hardware/scenario below estimate; estimate below serve/deploy/verify."""
    below = {
        "planner/model": ("planner.estimate", "planner.serve", "planner.deploy", "planner.verify", "planner.commands"),
        "planner/estimate": ("planner.serve", "planner.deploy", "planner.verify", "planner.commands", "planner.bench"),
    }
    for folder, banned in below.items():
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            for name in banned:
                assert f"from {name}" not in text and f"import {name}" not in text, (path, name)
