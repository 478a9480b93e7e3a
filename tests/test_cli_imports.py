"""Invariants of the CLI's start (issue 15): a command imports what it uses, not what every command uses.

A catalog model's ``plan --format json`` needs neither the Hub client (huggingface_hub, httpx2: ~0.4 s),
nor numpy (the step-cost arrays), nor rich (the table views), nor the other commands' modules. Each
row runs one command line in a fresh interpreter and lists the modules it must not have imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import contextlib, io, json, sys
from planner.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    status = main(json.loads(sys.argv[1]))
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""
HUB = ("huggingface_hub", "httpx2")


def imported(argv: list[str]) -> tuple[int, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["status"], {m.split(".")[0] for m in out["modules"]} | set(out["modules"])


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        (
            ["plan", "meta-llama/Llama-3.1-70B", "--gpu", "h100-sxm", "--format", "json"],
            (*HUB, "numpy", "rich", "planner.commands.simulate", "planner.commands.latency", "planner.serve"),
        ),
        (["plan", "llama-3.1-8b", "--tp", "2", "--format", "yaml"], (*HUB, "numpy", "rich")),
        (["models", "--format", "json"], (*HUB, "numpy", "rich", "planner.commands.plan")),
        (["latency", "meta-llama/Llama-3.1-8B", "--format", "json"], (*HUB, "rich", "planner.commands.plan")),
    ],
)
def test_command_imports_only_what_it_uses(argv: list[str], absent: tuple[str, ...]) -> None:
    status, modules = imported(argv)
    assert status == 0
    assert not modules & set(absent), f"{' '.join(argv)} imported {sorted(modules & set(absent))}"


def test_table_view_still_draws_with_rich() -> None:
    """The lazy rich import is only deferred: the table format imports and uses it."""
    status, modules = imported(["plan", "meta-llama/Llama-3.1-8B", "--format", "table"])
    assert status == 0 and "rich" in modules


def test_unknown_command_still_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """Naming no known command falls back to the full parser, whose error lists the choices."""
    from planner.cli import main

    assert main(["pln", "x"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'pln'" in err and "'plan'" in err and "'simulate'" in err
