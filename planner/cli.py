"""The command line, ``python -m planner COMMAND ...``: a thin shell over the core.

Commands are the modules of ``planner.commands`` (found with pkgutil, sorted by name; see that
package's docstring for the four names a module defines). Each returns a JSON-able result, which
this module prints as a table (rich on a terminal, plain text otherwise), JSON or YAML.

Errors: the core raises ``PlannerError`` with the numbers and the fix; bad flags and values that
pydantic rejects are the user's too. Each becomes one ``error: ...`` line on stderr and exit
status 2, never a traceback. An unexpected exception is a planner bug: exit status 1 with a
one-line message (``PLANNER_DEBUG=1`` shows the traceback). A Hugging Face token given on the
command line or in ``HF_TOKEN`` is masked in everything this module writes.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
from types import ModuleType
from typing import Any, NoReturn

import yaml
from pydantic import ValidationError

import planner
import planner.commands
from planner.commands.common import FORMATS, describe_validation_error, render, table, to_jsonable
from planner.errors import PlannerError

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USAGE = 2
REQUIRED = ("NAME", "HELP", "add_arguments", "run")
SKIP = ("common",)
MASK = "***"


class UsageError(Exception):
    """argparse's complaint about the command line, raised instead of exiting so it can be masked."""

    def __init__(self, usage: str, message: str):
        self.usage, self.message = usage, message
        super().__init__(message)


class Parser(argparse.ArgumentParser):
    """ArgumentParser that raises UsageError instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.format_usage(), message)


def discover_commands() -> list[ModuleType]:
    """The command modules of planner.commands, sorted by module name (``common`` and ``_*`` skipped).

    A module that fails to import is reported on stderr and left out, so one broken command does
    not take the others down.
    """
    modules = []
    for info in sorted(pkgutil.iter_modules(planner.commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in SKIP:
            continue
        try:
            module = importlib.import_module(f"{planner.commands.__name__}.{info.name}")
        except Exception as err:  # noqa: BLE001 (a plugin's bug must not hide the other commands)
            print(f"warning: command module planner.commands.{info.name} failed to import "
                  f"({type(err).__name__}: {err}); it is left out.", file=sys.stderr)
            continue
        if all(hasattr(module, name) for name in REQUIRED):
            modules.append(module)
    return modules


def build_parser(commands: list[ModuleType] | None = None) -> Parser:
    """The top-level parser with one subcommand per command module, each with ``--format``."""
    parser = Parser(
        prog="python -m planner",
        description="LLM-inference capacity planner: will a model fit on a GPU under vLLM, how fast will it "
        "run, and how to deploy it. Every predicted number says whether it is a bound, an estimate or calibrated.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"planner {planner.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for module in commands if commands is not None else discover_commands():
        example = getattr(module, "EXAMPLE", None)
        p = sub.add_parser(
            module.NAME,
            help=module.HELP,
            description=module.HELP,
            epilog=f"example:\n  {example}" if example else None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
        )
        module.add_arguments(p)
        p.add_argument("--format", choices=FORMATS, default="table",
                       help="Output: table (rich, or plain text when not a terminal), json or yaml. Default: table.")
        p.set_defaults(command_module=module)
    return parser


def format_result(module: ModuleType, result: Any, fmt: str) -> str:
    """The result as text: JSON via model_dump(mode='json'), YAML via yaml.safe_dump, or the command's table."""
    if fmt == "json":
        return json.dumps(to_jsonable(result), indent=2, ensure_ascii=False)
    if fmt == "yaml":
        return yaml.safe_dump(to_jsonable(result), sort_keys=False, allow_unicode=True, width=120).rstrip("\n")
    renderer = getattr(module, "render_table", None)
    return renderer(result) if renderer is not None else generic_table(result)


def generic_table(result: Any) -> str:
    """Fallback view: a key/value table for a dict, a column table for a list of dicts."""
    data = to_jsonable(result)
    if isinstance(data, list) and data and all(isinstance(row, dict) for row in data):
        columns = list(dict.fromkeys(key for row in data for key in row))
        return render(table(columns, ([_cell(row.get(c)) for c in columns] for row in data)))
    if isinstance(data, dict):
        return render(table(["key", "value"], ([k, _cell(v)] for k, v in data.items())))
    return str(data)


def _cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else str(value)


def _secrets(argv: list[str]) -> list[str]:
    """Values that must never be echoed: $HF_TOKEN and $HUGGING_FACE_HUB_TOKEN, the value after any flag
    with 'token' in its name (also a mistyped --hf_token that argparse would quote back), and any
    argument that looks like a Hugging Face token (hf_...)."""
    found = [os.environ.get("HF_TOKEN", ""), os.environ.get("HUGGING_FACE_HUB_TOKEN", "")]
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag.startswith("-") and "token" in flag.lower():
            found.append(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
        elif arg.startswith("hf_"):
            found.append(arg)
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def _mask(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def _emit(stream: Any, text: str, secrets: list[str]) -> None:
    try:
        print(_mask(text, secrets), file=stream)
        stream.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader has all it wanted
        pass


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (0 ok, 2 user error, 1 planner bug)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    secrets = _secrets(argv)
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as stop:  # --help and --version print, then exit 0
            return stop.code if isinstance(stop.code, int) else EXIT_OK
        module = args.command_module
        result = module.run(args)
        _emit(sys.stdout, format_result(module, result, args.format), secrets)
        return EXIT_OK
    except UsageError as err:
        _emit(sys.stderr, f"{err.usage.rstrip()}\nerror: {err.message}", secrets)
    except PlannerError as err:
        _emit(sys.stderr, f"error: {err}", secrets)
    except ValidationError as err:
        _emit(sys.stderr, f"error: {describe_validation_error(err)}", secrets)
    except FileNotFoundError as err:
        _emit(sys.stderr, f"error: no such file: {err.filename or err}", secrets)
    except IsADirectoryError as err:
        _emit(sys.stderr, f"error: {err.filename} is a folder, not a file", secrets)
    except OSError as err:  # e.g. --output-dir not writable
        _emit(sys.stderr, f"error: {err.strerror or err}: {err.filename or ''}".rstrip(": "), secrets)
    except KeyboardInterrupt:
        _emit(sys.stderr, "error: interrupted", secrets)
    except Exception as err:  # noqa: BLE001 (last line of defence: no tracebacks for users)
        if os.environ.get("PLANNER_DEBUG"):
            raise
        _emit(sys.stderr, f"error: internal error ({type(err).__name__}: {err}); this is a planner bug, "
              "please report it (PLANNER_DEBUG=1 shows the traceback).", secrets)
        return EXIT_BUG
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
