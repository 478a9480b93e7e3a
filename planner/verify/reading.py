"""Reading the files users hand in (vLLM logs, benchmark results): bounded size, strict text, bounded JSON.

Every reader of a user's file goes through here, so a binary file, a UTF-16 export, a JSON
nested 100,000 deep or a 5,000-digit number ends as a ``ConfigError`` that names the file and
says what is accepted, never as a UnicodeDecodeError, RecursionError or ValueError:

* size: a file is refused above its cap before it is read (``MAX_LOG_BYTES``, ``MAX_RESULT_BYTES``);
* text: bytes are decoded strictly as UTF-8 (a UTF-8 byte-order mark is dropped); UTF-16 is
  decoded when it carries a byte-order mark or its NUL pattern gives it away (PowerShell's ``>``
  writes UTF-16 LE); any other NUL byte or invalid UTF-8 is refused with its offset. Text that
  was already decoded with replacement characters (``errors="replace"``) is refused when it holds
  NULs or is mostly U+FFFD, the marks of a binary or UTF-16 file read as UTF-8;
* JSON: through ``planner.model.sources.loads_bounded``, the planner's one bounded JSON parser (at
  most ``MAX_JSON_DEPTH`` levels of nesting and ``MAX_NUMBER_CHARS`` characters per number; ``json``
  would otherwise recurse until RecursionError, and ``int()`` refuses more than 4,300 digits).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.errors import ConfigError
from planner.model.sources import MAX_JSON_DEPTH, MAX_NUMBER_CHARS, loads_bounded
from planner.units import fmt_bytes

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_LOG_BYTES",
    "MAX_NUMBER_CHARS",
    "MAX_RESULT_BYTES",
    "check_text",
    "decode_text",
    "loads_json",
    "read_text_file",
]

MAX_LOG_BYTES = 64 * 2**20
"""Largest vLLM log read, bytes (64 MiB; a startup log is a few MiB, the CLI has the same cap)."""
MAX_RESULT_BYTES = 64 * 2**20
"""Largest benchmark result file read, bytes (64 MiB; --save-detailed of 100,000 requests is ~30 MB)."""

_UTF16_BOMS = ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
_SNIFF_BYTES = 512
_REPLACEMENT = "\ufffd"


def read_text_file(
    path: str | Path,
    *,
    max_bytes: int,
    what: str,
    hint: str = "Pass the part from the server's start, e.g. `head -c 5M server.log > start.log`.",
) -> str:
    """The file at ``path`` as text (``decode_text``), refused above ``max_bytes``.

    ``what`` names the kind of file in messages ('vLLM log', 'benchmark result'); ``hint`` says
    what to do about a file over the cap.
    """
    file = Path(path).expanduser()
    try:
        size = file.stat().st_size
        if size > max_bytes:
            raise _too_big(str(path), size, max_bytes, what, hint)
        with file.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except ValueError as err:  # e.g. a NUL byte in the path
        raise ConfigError(f"cannot read {what} {str(path)[:200]!r}: {err}.") from None
    except OSError as err:
        raise ConfigError(f"cannot read {what} {path}: {err.strerror or err}.") from None
    if len(data) > max_bytes:  # grew while read, or a FIFO
        raise _too_big(str(path), len(data), max_bytes, what, hint)
    return decode_text(data, str(path))


def _too_big(origin: str, size: int, max_bytes: int, what: str, hint: str) -> ConfigError:
    return ConfigError(f"{origin} is {fmt_bytes(size)}; a {what} of at most {fmt_bytes(max_bytes)} is read.", hint=hint)


def decode_text(data: bytes, origin: str) -> str:
    """``data`` as text: UTF-8 (BOM dropped) or UTF-16 (BOM or NUL pattern); refuses anything else."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    encoding = _utf16_encoding(data)
    if encoding is not None:
        body = data[2:] if data[:2] in (b"\xff\xfe", b"\xfe\xff") else data
        try:
            text = body.decode(encoding)
        except UnicodeDecodeError as err:
            raise ConfigError(
                f"{origin} looks like {encoding.upper()} text but does not decode as it (byte offset "
                f"{err.start}): {err.reason}.",
                hint="Save it as UTF-8.",
            ) from None
        return check_text(text, origin)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ConfigError(
            f"{origin} is binary (a NUL byte at offset {nul:,}), not a text file; a UTF-8 or UTF-16 text file is read.",
            hint="Pass the log or JSON file itself, not an archive or a database.",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{origin} is not UTF-8 text: byte 0x{data[err.start]:02x} at offset {err.start:,} is not valid UTF-8; "
            "UTF-8 (with or without a BOM) or UTF-16 text is read.",
            hint="Convert it first, e.g. `iconv -f latin1 -t utf-8 FILE > FILE.utf8`.",
        ) from None


def _utf16_encoding(data: bytes) -> str | None:
    """'utf-16-le'/'utf-16-be' for a BOM or for ASCII-range text with every other byte NUL; else None."""
    for bom, encoding in _UTF16_BOMS:
        if data.startswith(bom):
            return encoding
    head = data[:_SNIFF_BYTES]
    head = head[: len(head) // 2 * 2]
    if len(head) < 4:
        return None
    half = len(head) // 2
    even_nul, odd_nul = head[0::2].count(0), head[1::2].count(0)
    if odd_nul >= 0.9 * half and even_nul <= 0.01 * half:
        return "utf-16-le"
    if even_nul >= 0.9 * half and odd_nul <= 0.01 * half:
        return "utf-16-be"
    return None


def check_text(text: str, origin: str) -> str:
    """``text`` unless it holds NULs or is mostly U+FFFD (a binary or UTF-16 file decoded as UTF-8)."""
    nul = text.find("\x00")
    if nul >= 0:
        head = text[:_SNIFF_BYTES]
        looks_utf16 = head.count("\x00") >= 0.3 * len(head)
        raise ConfigError(
            f"{origin} holds a NUL character at position {nul:,}: "
            + ("it looks like UTF-16 text read as UTF-8" if looks_utf16 else "it is binary, not text")
            + "; UTF-8 text is read.",
            hint="Save the file as UTF-8 (e.g. `iconv -f utf-16 -t utf-8`)"
            if looks_utf16
            else "Pass the log or JSON file itself.",
        )
    sample = text[:65536]
    bad = sample.count(_REPLACEMENT)
    if bad >= 16 and bad > len(sample) // 10:
        raise ConfigError(
            f"{origin} is mostly undecodable bytes ({bad:,} replacement characters in its first "
            f"{len(sample):,}): it is binary or not UTF-8; UTF-8 text is read.",
            hint="Pass the log or JSON file itself, saved as UTF-8.",
        )
    return text


def loads_json(text: str, origin: str) -> Any:
    """Bounded JSON of a user's file: ``planner.model.sources.loads_bounded`` (nesting, number length,
    non-finite numbers), the one parser every face uses. Raises ``json.JSONDecodeError`` for text
    that is not JSON (callers may try JSON lines next) and ``ConfigError`` beyond the bounds."""
    return loads_bounded(text, origin, hint="Pass the file the tool wrote, unchanged.", allow_non_finite=True)
