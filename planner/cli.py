"""The command line, ``python -m planner COMMAND ...``: a thin shell over the core.

Commands are the modules of ``planner.commands`` (found with pkgutil, sorted by name; see that
package's docstring for the four names a module defines). Each returns a JSON-able result, which
this module prints as a table (rich on a terminal, plain text otherwise), JSON or YAML.

Errors become one ``error: ...`` line on stderr, never a traceback, and an exit status from the
table ``EXIT_CODES`` (error class -> status; the first class of the error's MRO listed there
decides; docs/cli.md prints the table):

- 0: the command ran. A plan that does not fit is a result (``fits: false``), not an error.
- 2, usage: bad flags or values (argparse's ``UsageError``, pydantic's ``ValidationError``) and
  bad input (``PlannerError``: malformed config.json, impossible scenario, unknown model or GPU).
- 1, runtime: the network (``HubUnavailableError``), the file system (``OSError``), or a planner
  bug (any other exception; ``PLANNER_DEBUG=1`` prints the traceback).
- 130: interrupted (Ctrl-C).

Secrets are masked (``***``) in everything written to stdout and stderr while a command runs,
warnings included: the value of ``--hf-token`` (and of a mistyped ``--hf_token`` argparse quotes
back), ``$HF_TOKEN`` and ``$HUGGING_FACE_HUB_TOKEN``, the saved Hugging Face login, any
``hf_...``-shaped token, and the user:password part of a URL (e.g. in ``$HF_ENDPOINT``). Only
strings of at least 8 characters that are not numbers are masked as literals, so ``2048`` in
``--max-num-batched-tokens 2048`` stays ``2048``.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import importlib
import json
import os
import pkgutil
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn
from urllib.parse import unquote, urlsplit

import yaml
from pydantic import ValidationError

import planner
import planner.commands
from planner.commands.common import FORMATS, describe_validation_error, render, table, to_jsonable
from planner.errors import HubUnavailableError, PlannerError

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
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


# ------------------------------------------------------------------------- errors -> exit status


def _usage_text(err: UsageError) -> str:
    return f"{err.usage.rstrip()}\nerror: {err.message}"


def _os_text(err: OSError) -> str:
    if isinstance(err, FileNotFoundError):
        return f"error: no such file: {err.filename or err}"
    if isinstance(err, IsADirectoryError):
        return f"error: {err.filename} is a folder, not a file"
    return f"error: {err.strerror or err}: {err.filename or ''}".rstrip(": ")


def _bug_text(err: BaseException) -> str:
    return (
        f"error: internal error ({type(err).__name__}: {err}); this is a planner bug, please report it "
        "(PLANNER_DEBUG=1 shows the traceback)."
    )


@dataclass(frozen=True)
class ErrorRule:
    """How the command line answers one class of error: its exit status, its one-line message, and what it
    means (for docs/cli.md)."""

    exit_code: int
    message: Callable[[Any], str]
    meaning: str


#: Error class -> exit status and message; the first class of an error's MRO listed here decides
#: (so HubUnavailableError is found before PlannerError, FileNotFoundError goes to OSError).
EXIT_CODES: dict[type[BaseException], ErrorRule] = {
    UsageError: ErrorRule(
        EXIT_USAGE,
        _usage_text,
        "a bad command line: unknown flag, missing argument, a value that is not a number or out of its range",
    ),
    ValidationError: ErrorRule(
        EXIT_USAGE,
        lambda err: f"error: {describe_validation_error(err)}",
        "a value the scenario's fields refuse (named by its flag)",
    ),
    HubUnavailableError: ErrorRule(
        EXIT_RUNTIME,
        lambda err: f"error: {err}",
        "the Hub cannot be reached (network, proxy, timeout) and no copy is cached",
    ),
    PlannerError: ErrorRule(
        EXIT_USAGE,
        lambda err: f"error: {err}",
        "bad input: a malformed config.json, an "
        "impossible scenario, an unknown model or GPU, a gated repo without a token",
    ),
    OSError: ErrorRule(
        EXIT_RUNTIME, _os_text, "the file system: a file that cannot be read, a folder that cannot be written"
    ),
    KeyboardInterrupt: ErrorRule(EXIT_INTERRUPTED, lambda err: "error: interrupted", "interrupted (Ctrl-C)"),
    Exception: ErrorRule(
        EXIT_RUNTIME, _bug_text, "anything else: a planner bug (PLANNER_DEBUG=1 prints the traceback)"
    ),
}


def error_rule(err: BaseException) -> ErrorRule:
    """The EXIT_CODES row of ``err``: the first class of its MRO in the table (a bug if none is)."""
    return next((EXIT_CODES[cls] for cls in type(err).__mro__ if cls in EXIT_CODES), EXIT_CODES[Exception])


# --------------------------------------------------------------------------------- secrets

#: A Hugging Face user access token: "hf_" and 34 letters and digits today; 20 or more are masked.
HF_TOKEN_PATTERN = re.compile(r"hf_[A-Za-z0-9]{20,}")
#: The user[:password] part of a URL: "https://user:secret@host" -> "https://***@host".
URL_USERINFO_PATTERN = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@\"']+@")
#: Flags whose value is a token, compared without dashes, underscores and case, so that a mistyped
#: --hf_token or --HF-TOKEN (which argparse quotes back as unrecognized) is masked too.
SECRET_FLAG_NAMES = frozenset(
    {
        "hftoken",
        "token",
        "huggingfacetoken",
        "huggingfacehubtoken",
        "hubtoken",
        "hfapitoken",
        "accesstoken",
        "authtoken",
    }
)
TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MIN_SECRET_CHARS = 8
MAX_TOKEN_FILE_BYTES = 64 * 1024
_NUMBER = re.compile(r"[+-]?(\d[\d_,]*(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _is_secret_flag(flag: str) -> bool:
    """--hf-token, --hf_token, --HF-TOKEN, --token ... (and an hf-prefixed misspelling such as --hf-tokn)."""
    name = re.sub(r"[-_]", "", flag.lower())
    return name in SECRET_FLAG_NAMES or (name.startswith("hf") and "tok" in name)


def _flag_values(argv: list[str]) -> list[str]:
    """Values given to secret flags, as ``--hf-token X`` or ``--hf-token=X``."""
    found = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag.startswith("-") and _is_secret_flag(flag):
            found.append(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    return found


def _hf_home() -> Path:
    """huggingface_hub's HF_HOME: $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface."""
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(cache, "huggingface").expanduser()


def _read_small(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_TOKEN_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _saved_logins() -> list[str]:
    """The saved Hugging Face login(s), read from huggingface_hub's files without importing it.

    ``$HF_TOKEN_PATH`` (default HF_HOME/token) holds the active token; ``$HF_STORED_TOKENS_PATH``
    (default HF_HOME/stored_tokens) is an INI file with one ``hf_token = ...`` per saved login
    (huggingface_hub/constants.py). When huggingface_hub is already imported, its own ``get_token()``
    answers too (it may be configured differently); it is never imported just for this.
    """
    home = _hf_home()
    found = [_read_small(Path(os.environ.get("HF_TOKEN_PATH") or home / "token").expanduser()).strip()]
    stored = _read_small(Path(os.environ.get("HF_STORED_TOKENS_PATH") or home / "stored_tokens").expanduser())
    if stored:
        parser = configparser.ConfigParser(interpolation=None)
        with contextlib.suppress(configparser.Error):
            parser.read_string(stored)
            found += [section.get("hf_token", "") for section in parser.values()]
    hub = sys.modules.get("huggingface_hub")
    if hub is not None:
        with contextlib.suppress(Exception):  # a broken login must not stop the command
            found.append(hub.get_token() or "")
    return found


def _url_secrets(url: str) -> list[str]:
    """The secret of a URL's userinfo, raw and decoded: the password of https://user:secret@host, or the
    whole of https://token@host (a user name beside a password is not secret)."""
    try:
        parts = urlsplit(url)
        secret = parts.password if parts.password is not None else parts.username
    except ValueError:
        return []
    return [secret, unquote(secret)] if secret else []


def _plausible_secret(text: str) -> bool:
    """At least 8 characters and not a number: '2048' or '16777216' is never masked."""
    return len(text) >= MIN_SECRET_CHARS and not _NUMBER.fullmatch(text)


def collect_secrets(argv: list[str]) -> list[str]:
    """Every literal secret this run may echo, longest first: flag values, token variables, saved logins,
    the userinfo of $HF_ENDPOINT."""
    found = [
        *_flag_values(argv),
        *(os.environ.get(name, "") for name in TOKEN_ENV),
        *_saved_logins(),
        *_url_secrets(os.environ.get("HF_ENDPOINT", "")),
    ]
    unique = {s.strip() for s in found if _plausible_secret(s.strip())}
    return sorted(unique, key=len, reverse=True)


def mask(text: str, secrets: list[str]) -> str:
    """``text`` with each secret, each hf_... token and each URL's user:password replaced by ***."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    text = HF_TOKEN_PATTERN.sub(MASK, text)
    return URL_USERINFO_PATTERN.sub(rf"\1{MASK}@", text)


class MaskedStream:
    """A text stream that masks secrets in what is written to it, a line at a time.

    Whole lines are masked and passed on as they come; a partial line waits for its newline or a
    flush, so a secret written in two pieces within one line is still masked. Everything else
    (isatty, encoding, fileno ...) is the wrapped stream's.
    """

    def __init__(self, stream: Any, secrets: list[str]):
        self._stream, self._secrets, self._pending = stream, secrets, ""

    def write(self, text: str) -> int:
        head, newline, self._pending = (self._pending + text).rpartition("\n")
        if newline:
            self._pass_on(head + newline)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pending, self._pending = self._pending, ""
        if pending:
            self._pass_on(pending)
        with contextlib.suppress(BrokenPipeError, ValueError):
            self._stream.flush()

    def _pass_on(self, text: str) -> None:
        try:
            self._stream.write(mask(text, self._secrets))
        except BrokenPipeError:  # e.g. piped into `head`: the reader has all it wanted
            _silence(self._stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _silence(stream: Any) -> None:
    """After a broken pipe, point the stream's descriptor at /dev/null so the exit flush stays quiet."""
    with contextlib.suppress(Exception):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())


@contextlib.contextmanager
def masked_output(secrets: list[str]) -> Iterator[None]:
    """sys.stdout and sys.stderr masked while the block runs (prints, warnings, logging's last resort)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = MaskedStream(saved[0], secrets), MaskedStream(saved[1], secrets)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = saved


# -------------------------------------------------------------------------------- commands


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
            print(
                f"warning: command module planner.commands.{info.name} failed to import "
                f"({type(err).__name__}: {err}); it is left out.",
                file=sys.stderr,
            )
            continue
        if all(hasattr(module, name) for name in REQUIRED):
            modules.append(module)
    return modules


def requested_command(argv: list[str]) -> ModuleType | None:
    """The one command module ``argv`` names, imported alone (a whole process then pays for one command's
    imports, not every command's); None when argv names no command module, so the full parser answers
    (top-level --help, an unknown or misspelt command, a module whose NAME is not its file name).

    The top-level parser has no option that takes a value, so the first argument that is not an option
    is the command.
    """
    name = next((a for a in argv if not a.startswith("-")), None)
    if (
        name is None
        or name.startswith("_")
        or name in SKIP
        or any(a in ("-h", "--help", "--version") for a in argv[: argv.index(name)])
    ):
        return None
    if name not in {info.name for info in pkgutil.iter_modules(planner.commands.__path__)}:
        return None
    try:
        module = importlib.import_module(f"{planner.commands.__name__}.{name}")
    except Exception:  # noqa: BLE001 (discover_commands reports it and leaves it out)
        return None
    if getattr(module, "NAME", None) != name or not all(hasattr(module, n) for n in REQUIRED):
        return None
    return module


def build_parser(commands: list[ModuleType] | None = None) -> Parser:
    """The top-level parser with one subcommand per command module, each with ``--format``."""
    parser = Parser(
        prog="python -m planner",
        description="LLM-inference capacity planner: will a model fit on a GPU under vLLM (or SGLang, TensorRT-LLM), "
        "how fast will it run, and how to deploy it. Every predicted number says whether it is a bound, an estimate "
        "or calibrated.",
        epilog="exit status: 0 ok (a plan that does not fit included), 2 bad flags, values or config, "
        "1 network, file system or planner bug.",
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
        p.add_argument(
            "--format",
            choices=FORMATS,
            default="table",
            help="Output: table (rich, or plain text when not a terminal), json or yaml. Default: table.",
        )
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


def _run(argv: list[str]) -> int:
    """Parse, run one command and print its result; an error is answered by its EXIT_CODES row."""
    try:
        one = requested_command(argv)
        parser = build_parser([one] if one is not None else None)
        try:
            args = parser.parse_args(argv)
        except SystemExit as stop:  # --help and --version print, then exit 0
            return stop.code if isinstance(stop.code, int) else EXIT_OK
        module = args.command_module
        result = module.run(args)
        print(format_result(module, result, args.format))
        return EXIT_OK
    except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 (last line of defence: no tracebacks for users)
        rule = error_rule(err)
        if rule is EXIT_CODES[Exception] and os.environ.get("PLANNER_DEBUG"):
            traceback.print_exc()  # to the masked stderr
        print(rule.message(err), file=sys.stderr)
        return rule.exit_code


def main(argv: list[str] | None = None) -> int:
    """Run one command with secrets masked in its output; returns the exit status (see EXIT_CODES)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with masked_output(collect_secrets(argv)):
        return _run(argv)


if __name__ == "__main__":
    sys.exit(main())
