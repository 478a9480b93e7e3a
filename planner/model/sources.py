"""Where a model's config.json comes from: a local file, the bundled catalog, the Hub, its cache, or an upload.

``load_config(model)`` answers with the raw config dict plus where it came from, so every
plan can cite its source. Resolution order:

1. ``model`` is an existing path: a config.json file, or a folder holding one (only with
   ``allow_local=True``; the app passes False, so a link or a text box never reads the server's
   files).
2. ``prefer="auto"`` and no ``revision``: a catalog hit (repo id, case-insensitive, or an
   alias) is answered from ``planner/model/catalog/`` with no network at all, so the app
   works offline and instantly for the common models.
3. The Hub: ``config.json`` of ``org/name`` (or of a subfolder, ``org/name/sub/dir``) into the
   normal HF cache. Only that file is fetched; no weights, no remote code. A repo without a
   config.json is asked for its file list: a Mistral ``params.json`` is read through
   :func:`mistral_params_to_config`, config.json files in subfolders are named in the error.
4. The Hub failed for a reason that is not the user's (timeout, no connection, 5xx,
   HF_HUB_OFFLINE): the HF-cache copy, else the catalog copy, each with a warning; else
   ``HubUnavailableError``. A missing repo, a gated repo or a repo without config.json is
   the user's to fix and raises at once (a gated repo still falls back to a cached copy).

Bounded work. Everything read from a user or a server goes through :func:`parse_json`: at most
``MAX_CONFIG_BYTES``, ``MAX_JSON_DEPTH`` levels of nesting and ``MAX_NUMBER_CHARS`` characters
per number, finite numbers only; every failure is a ``ConfigError`` naming the file and the key.
A Hub load has ONE deadline, ``timeout_s``, for all its requests together (HEAD, GET, file list):
huggingface_hub (2.4) gives no total deadline: ``hf_hub_download`` reads with a 10 s timeout
per socket read (``HF_HUB_DOWNLOAD_TIMEOUT``) and resumes a broken GET five times, so a stalled
server takes about 70 s and one sending a byte every 3 s never times out. So the requests run
in a worker thread that the caller waits for until the deadline and then abandons (the thread
ends by itself: each of its reads has a timeout no longer than the time that was left, and it
checks the deadline between chunks). The HEAD is the client's own ``get_hf_file_metadata``
(one request, no retries); the GET streams the resolved URL through the client's own session
(``huggingface_hub.get_session``, so proxies, offline mode and headers behave as usual) and
stops past ``MAX_CONFIG_BYTES``; the file is then written into the HF cache in its documented
layout (``blobs/<etag>``, ``snapshots/<commit>/<file>``, ``refs/<branch>``), where
``try_to_load_from_cache`` and transformers find it.

Environment read at call time (not at import, unlike huggingface_hub's constants):
HF_ENDPOINT, HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, HF_HUB_CACHE / HF_HOME. HF_TOKEN and the
saved login are looked up by huggingface_hub itself when ``token`` is None. Tokens never
appear in messages.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import quote, urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.errors import ConfigError, GatedModelError, HubUnavailableError, ModelNotFoundError, redact_secrets

# huggingface_hub and its HTTP client (httpx2) are imported inside the functions that talk to the Hub:
# together they take ~0.4 s to import, which a catalog model or a local file never needs.

DEFAULT_CATALOG_DIR = Path(__file__).parent / "catalog"
"""Bundled catalog: ``index.yaml`` plus one verbatim ``<org>--<name>.json`` per model."""

DEFAULT_HUB_ENDPOINT = "https://huggingface.co"
CONFIG_FILENAME = "config.json"
PARAMS_FILENAME = "params.json"
"""Mistral's own format (mistral-inference), shipped beside or instead of config.json."""
MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""A config.json is a few KiB (the largest multimodal ones ~100 KiB); 4 MiB means a wrong file."""
MAX_JSON_DEPTH = 64
"""Nesting levels a config may have; the bundled catalog's deepest has 3 (``rope_scaling`` in ``text_config``)."""
MAX_NUMBER_CHARS = 64
"""Characters in one JSON number; a config's longest is ~20 (a float repr). Python refuses ints over 4,300 digits."""
MAX_TIMEOUT_S = 3600.0
"""Longest ``timeout_s`` accepted: an hour is not a deadline anyone means for a few-KiB file."""
LISTED_NAMES_SHOWN = 10

Origin = Literal["catalog", "hub", "hub-cache", "file", "upload"]
Prefer = Literal["auto", "hub", "catalog"]
_OFFLINE_REASON = "HF_HUB_OFFLINE is set"
_SAFE_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_SAFE_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*")
_T = TypeVar("_T")


class CatalogEntry(BaseModel):
    """One model in the bundled catalog (an entry of ``catalog/index.yaml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo_id: str = Field(description="Hub repo id the config was copied from, e.g. 'meta-llama/Llama-3.1-8B'.")
    file: str = Field(description="File name of the verbatim config.json copy inside the catalog folder.")
    family: str = Field(description="Model family for grouping in pickers, e.g. 'llama', 'qwen', 'deepseek'.")
    source: str = Field(description="Citation of the copy: Hub URL with the commit it was taken at.")
    aliases: list[str] = Field(
        default_factory=list, description="Short lowercase names that also select this entry, e.g. 'llama3.1-8b'."
    )
    notes: str | None = Field(default=None, description="Free text: why it is in the catalog, caveats.")


class LoadedConfig(BaseModel):
    """A raw config.json and where it came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: dict[str, Any] = Field(
        description="The config.json as parsed, unmodified (a Mistral params.json translated to config.json keys)."
    )
    name: str = Field(
        description="Model name as the user gave it (repo id or path); the canonical repo id for catalog hits."
    )
    origin: Origin = Field(
        description="Where the config came from: bundled catalog, Hub, HF-cache copy, local file or upload."
    )
    source: str = Field(description="Human citation: catalog entry, Hub URL with commit, or file path.")
    warnings: list[str] = Field(
        default_factory=list, description="Things the user should know, e.g. that the Hub was unreachable."
    )

    @field_validator("source")
    @classmethod
    def _no_secret_in_source(cls, value: str) -> str:
        return redact_secrets(value)

    @field_validator("warnings")
    @classmethod
    def _no_secret_in_warnings(cls, value: list[str]) -> list[str]:
        return [redact_secrets(w) for w in value]


# ---- public API ----------------------------------------------------------------------------------


def load_config(
    model: str,
    *,
    token: str | None = None,
    revision: str | None = None,
    prefer: Prefer = "auto",
    catalog_dir: str | Path | None = None,
    timeout_s: float = 10.0,
    allow_local: bool = True,
) -> LoadedConfig:
    """Find ``model``'s config.json: local path, then catalog, then the Hub (see the module docstring).

    ``prefer="hub"`` asks the Hub first even for catalog models (aliases still resolve to their
    repo id) and falls back to cache and catalog only when the Hub cannot be reached.
    ``prefer="catalog"`` never touches the network. Passing ``revision`` skips the catalog in
    "auto" mode, since the catalog copy is of one fixed commit. ``timeout_s`` is the deadline
    of the whole Hub load. ``allow_local=False`` never reads a local path (a name that looks like
    one is refused): for faces whose users must not read the server's files.
    """
    if prefer not in ("auto", "hub", "catalog"):
        raise ValueError(f"prefer must be 'auto', 'hub' or 'catalog', not {prefer!r}")
    if not (isinstance(timeout_s, (int, float)) and 0 < timeout_s <= MAX_TIMEOUT_S):
        raise ValueError(f"timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], not {timeout_s!r}")
    model = str(model).strip()
    if not model:
        raise ModelNotFoundError(
            "No model given.", hint="Pass a Hub repo id, a catalog name or a path to a config.json."
        )

    if allow_local:
        local = _load_local(model)
        if local is not None:
            return local
    elif _looks_like_path(model):
        raise _local_refused(model)

    entries = catalog_entries(catalog_dir)
    repo_id = _strip_hub_url(model)
    entry = _find_entry(repo_id, entries)
    if entry is not None and (prefer == "catalog" or (prefer == "auto" and revision is None)):
        return _from_catalog(entry, catalog_dir, warnings=[])
    if prefer == "catalog":
        raise ModelNotFoundError(
            f"'{model}' is not in the bundled catalog.",
            hint=f"{_suggestion_text(repo_id, entries)} Or drop prefer='catalog' to fetch it from the Hub.",
        )
    if entry is not None:
        repo_id = entry.repo_id
    request = _hub_request(repo_id, entries, token=token, revision=revision, allow_local=allow_local)
    return _from_hub(request, entries, catalog_dir=catalog_dir, timeout_s=float(timeout_s))


def check_remote_name(model: str, catalog_dir: str | Path | None = None) -> str:
    """``model`` stripped, if it is a catalog name or a Hub id ('org/name', 'org/name/subfolder', a Hub URL).

    Touches neither the file system nor the network; ModelNotFoundError (saying what is accepted)
    otherwise. For faces that take a model name from a link or a text box.
    """
    model = str(model).strip()
    if _looks_like_path(model):
        raise _local_refused(model)
    entries = catalog_entries(catalog_dir)
    name = _strip_hub_url(model)
    if _find_entry(name, entries) is None:
        _hub_request(name, entries, token=None, revision=None, allow_local=False)
    return model


def load_uploaded(data: bytes, filename: str) -> LoadedConfig:
    """Parse a config.json uploaded in the app; ConfigError if it is not one."""
    where = f"uploaded file '{filename}'"
    config = _parse_config(data, where, hint="Upload the model's config.json, not its weights or tokenizer.json.")
    return LoadedConfig(config=config, name=filename, origin="upload", source=where)


def parse_json(
    data: bytes, where: str, *, max_bytes: int = MAX_CONFIG_BYTES, hint: str = "Give the model's config.json."
) -> Any:
    """JSON bytes from a user or a server -> the parsed value, or ConfigError naming ``where`` and the problem.

    Refused, each with the key where it is: more than ``max_bytes``; text that is not UTF-8;
    invalid JSON (with line and column); nesting deeper than ``MAX_JSON_DEPTH``; a number longer
    than ``MAX_NUMBER_CHARS`` characters (e.g. a 5,000-digit integer, which Python would refuse
    with a ValueError); ``NaN``, ``Infinity`` and numbers that overflow to infinity (``1e400``).
    A UTF-8 byte-order mark is accepted.
    """
    if len(data) > max_bytes:
        raise ConfigError(
            f"{where} is {len(data) / 2**20:.1f} MiB; a config.json is a few KiB (the limit is "
            f"{max_bytes / 2**20:g} MiB).",
            hint=hint,
        )
    text = _decode(data, where, hint)
    try:
        return loads_bounded(text, where, hint=hint)
    except json.JSONDecodeError as err:
        problem = f"{err.msg} at line {err.lineno} column {err.colno}"
        raise ConfigError(f"{where} is not valid JSON: {problem}.", hint=hint) from None


def loads_bounded(text: str, where: str, *, hint: str, allow_non_finite: bool = False) -> Any:
    """JSON text -> the parsed value, with nesting at most ``MAX_JSON_DEPTH``, numbers at most
    ``MAX_NUMBER_CHARS`` characters and no NaN/Infinity/overflow: a ConfigError naming ``where`` and
    the key otherwise. Text that is not JSON raises ``json.JSONDecodeError`` (a caller may try JSON
    lines next). Every JSON a user or a server hands the planner is parsed here (config.json files,
    bench results). ``allow_non_finite``: keep ``NaN``/``Infinity``/overflowing floats as floats (vLLM's
    bench files write ``"request_rate": Infinity``; their readers check each field's range)."""
    finite = not allow_non_finite
    try:
        value = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float if finite else _parse_float_any,
            parse_constant=_NotANumber.constant if finite else float,
        )
    except RecursionError:
        raise ConfigError(f"{where}: nesting deeper than {MAX_JSON_DEPTH} levels.", hint=hint) from None
    _check_tree(value, where, hint)
    return value


def catalog_entries(catalog_dir: str | Path | None = None) -> list[CatalogEntry]:
    """Entries of the catalog's ``index.yaml``, in file order. Empty if the bundled catalog has no index yet."""
    folder = Path(catalog_dir) if catalog_dir is not None else DEFAULT_CATALOG_DIR
    index = folder / "index.yaml"
    try:
        stat = index.stat()
    except FileNotFoundError:
        if catalog_dir is None:
            return []
        raise ConfigError(
            f"catalog folder {folder} has no index.yaml.", hint="Point catalog_dir at a folder holding index.yaml."
        ) from None
    return list(_read_index(str(index.resolve()), stat.st_mtime_ns, stat.st_size))


def search_catalog(query: str, catalog_dir: str | Path | None = None) -> list[CatalogEntry]:
    """Catalog entries matching ``query``, best first: exact, prefix, substring, then fuzzy (difflib).

    Matches repo id, the name after the slash and aliases, ignoring case and punctuation, so
    "llama 3.1 8b" finds "meta-llama/Llama-3.1-8B"; a query equal to a family ("qwen") lists that
    family. An empty query lists everything.
    """
    entries = catalog_entries(catalog_dir)
    query = query.strip().lower()
    if not query:
        return entries
    ranked = []
    for position, entry in enumerate(entries):
        score = _match_score(query, entry)
        if score is not None:
            ranked.append((score, position, entry))
    ranked.sort(key=lambda item: (item[0], item[1]))
    return [entry for _, _, entry in ranked]


def fetch_safetensors_param_counts(
    repo_id: str, token: str | None = None, *, revision: str | None = None, timeout_s: float = 10.0
) -> dict[str, int] | None:
    """Parameters per dtype from the repo's safetensors headers (no weights read), None on any failure.

    Uses ``HfApi.get_safetensors_metadata``: HEADs to find model.safetensors or the shard index,
    then ranged GETs of the first bytes of each file. Returns e.g. ``{"BF16": 8030261248}``.
    ``timeout_s`` bounds the whole call (the worker thread is abandoned past it).
    """
    from huggingface_hub import HfApi
    from huggingface_hub.utils import validate_repo_id

    if _offline() or not 0 < timeout_s <= MAX_TIMEOUT_S:
        return None
    try:
        validate_repo_id(repo_id)
        api = HfApi(endpoint=_endpoint(), token=token)
        metadata = _before_deadline(
            lambda: api.get_safetensors_metadata(repo_id, revision=revision, timeout=timeout_s),
            time.monotonic() + timeout_s,
        )
        return {str(dtype): int(count) for dtype, count in metadata.parameter_count.items()}
    except Exception:  # noqa: BLE001 (optional enrichment: any failure means "unknown")
        return None


# ---- JSON with bounds ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _NotANumber:
    """Stands in the parsed tree for a number that is refused, so the walk can name its key."""

    text: str
    problem: str
    limit: str = ""
    joiner: str = ": "

    @classmethod
    def constant(cls, text: str) -> _NotANumber:
        return cls(text, f"{text} is not a finite number (JSON has no NaN or Infinity)")


def _too_long(text: str) -> _NotANumber:
    digits = sum(ch.isdigit() for ch in text)
    limit = f" (a number may have at most {MAX_NUMBER_CHARS} characters)"
    return _NotANumber(
        text, f"a number of {len(text):,} characters, a number with {digits:,} digits", limit, joiner=" holds "
    )


def _parse_int(text: str) -> int | _NotANumber:
    return int(text) if len(text) <= MAX_NUMBER_CHARS else _too_long(text)


def _parse_float(text: str) -> float | _NotANumber:
    if len(text) > MAX_NUMBER_CHARS:
        return _too_long(text)
    value = float(text)
    if not math.isfinite(value):
        return _NotANumber(text, f"{text} overflows to infinity (the largest float is about 1.8e308)")
    return value


def _parse_float_any(text: str) -> float | _NotANumber:
    return _too_long(text) if len(text) > MAX_NUMBER_CHARS else float(text)


def _decode(data: bytes, where: str, hint: str) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ConfigError(f"{where} is UTF-16 text; a config.json is UTF-8.", hint=f"Save it as UTF-8. {hint}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{where} is not UTF-8 text (bad byte at offset {err.start}); a config.json is JSON text.", hint=hint
        ) from None


def _key_text(path: tuple[str | int, ...]) -> str:
    """('text_config', 'layer_types', 3) -> "key 'text_config.layer_types[3]'"; () -> 'the top level'."""
    if not path:
        return "the top level"
    shown = path if len(path) <= 8 else (*path[:4], "...", *path[-3:])
    text = ""
    for part in shown:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return f"key '{text}'"


def _check_tree(value: Any, where: str, hint: str) -> None:
    """Walk the parsed value (iteratively): refuse too-deep nesting and the refused numbers, naming the key."""
    stack: list[tuple[Any, tuple[str | int, ...], int]] = [(value, (), 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, _NotANumber):
            raise ConfigError(f"{where}{item.joiner}{item.problem} at {_key_text(path)}{item.limit}.", hint=hint)
        if isinstance(item, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                problem = f"nesting deeper than {MAX_JSON_DEPTH} levels at {_key_text(path)}"
                raise ConfigError(f"{where}: {problem}.", hint=hint)
            children = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend((child, (*path, key), depth + 1) for key, child in reversed(list(children)))


def _parse_config(data: bytes, where: str, *, hint: str = "Give the model's config.json.") -> dict[str, Any]:
    """Bytes -> config dict, or ConfigError naming ``where`` and the position of the problem."""
    config = parse_json(data, where, hint=hint)
    if not isinstance(config, dict):
        kind = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
        raise ConfigError(
            f"{where} holds a JSON {kind.get(type(config), 'null')}, but a config.json is a JSON object.", hint=hint
        )
    if "model_type" not in config and "architectures" not in config:
        raise ConfigError(
            f"{where} is a JSON object without 'model_type' or 'architectures', so it is not a "
            "Transformers config.json (tokenizer, generation or adapter configs look like this).",
            hint=hint,
        )
    return config


# ---- local files ---------------------------------------------------------------------------------


def _looks_like_path(model: str) -> bool:
    """A name that is meant as a file path: absolute, relative with ./ or ~, a Windows path, or a .json file."""
    return (
        model.startswith(("/", "./", "../", "~", ".\\", "\\", "file:"))
        or "\\" in model
        or re.match(r"^[A-Za-z]:", model) is not None
        or model.lower().endswith(".json")
        or model in (".", "..")
    )


def _local_refused(model: str) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"'{model}' looks like a file path; local files are not read here.",
        hint="Upload the config.json instead, or give a catalog name or a Hub repo id such as 'org/name'.",
    )


def _load_local(model: str) -> LoadedConfig | None:
    """A config.json file or a folder holding one; None if ``model`` does not look like a path."""
    path = Path(model).expanduser()
    if path.is_dir():
        config_path = path / CONFIG_FILENAME
        if not config_path.is_file():
            raise ModelNotFoundError(
                f"folder {path} has no {CONFIG_FILENAME}.",
                hint="Point at the folder holding the model's config.json, or at the file itself.",
            )
        path = config_path
    elif not path.is_file():
        if _looks_like_path(model):
            raise ModelNotFoundError(
                f"no file at {path}.", hint="Check the path, or give a Hub repo id such as 'org/name'."
            )
        return None
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path} is {size / 2**20:.1f} MiB; a config.json is a few KiB.",
            hint="Give the model's config.json, not a weights file.",
        )
    with path.open("rb") as file:
        data = file.read(MAX_CONFIG_BYTES + 1)  # the file may have grown since the stat
    config = _parse_config(data, str(path), hint="Give the model's config.json, not a weights file.")
    return LoadedConfig(config=config, name=model, origin="file", source=str(path.resolve()))


# ---- catalog -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _read_index(index_path: str, mtime_ns: int, size: int) -> tuple[CatalogEntry, ...]:
    """Parse and check index.yaml; cached per (path, mtime, size) so edits are picked up."""
    try:
        # libyaml's safe loader when PyYAML has it (several times faster), else the pure-Python one
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        raw = yaml.load(Path(index_path).read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as err:
        raise ConfigError(f"catalog index {index_path} is not valid YAML: {err}") from None
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"catalog index {index_path} must be a YAML list of entries, not {type(raw).__name__}.")
    entries = []
    claimed: dict[str, str] = {}  # lowercase id or alias -> repo id of the entry that claims it
    for position, item in enumerate(raw):
        try:
            entry = CatalogEntry.model_validate(item)
        except ValidationError as err:
            raise ConfigError(f"catalog index {index_path}, entry {position}: {err}") from None
        for key in {entry.repo_id.lower(), *(alias.lower() for alias in entry.aliases)}:
            if key in claimed:
                raise ConfigError(
                    f"catalog index {index_path}: '{key}' is claimed by two entries "
                    f"({claimed[key]} and {entry.repo_id}).",
                    hint="Each repo id and alias must select exactly one entry.",
                )
            claimed[key] = entry.repo_id
        entries.append(entry)
    return tuple(entries)


def _find_entry(name: str, entries: list[CatalogEntry]) -> CatalogEntry | None:
    """Exact repo id (case-insensitive) or alias."""
    key = name.lower()
    for entry in entries:
        if entry.repo_id.lower() == key or key in (alias.lower() for alias in entry.aliases):
            return entry
    return None


def _from_catalog(entry: CatalogEntry, catalog_dir: str | Path | None, *, warnings: list[str]) -> LoadedConfig:
    folder = Path(catalog_dir) if catalog_dir is not None else DEFAULT_CATALOG_DIR
    path = folder / entry.file
    if not path.is_file():
        raise ConfigError(
            f"catalog entry {entry.repo_id} names {entry.file}, which is not in {folder}.",
            hint="Fix catalog/index.yaml or add the file.",
        )
    config = _parse_config(path.read_bytes(), f"catalog file {path}")
    return LoadedConfig(
        config=config,
        name=entry.repo_id,
        origin="catalog",
        source=f"bundled catalog copy {entry.file} (from {entry.source})",
        warnings=warnings,
    )


def normalise_name(text: str) -> str:
    """A model name for matching: lower case, letters and digits only ('Llama-3.1-8B' -> 'llama318b')."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _match_score(query: str, entry: CatalogEntry) -> tuple[int, float] | None:
    """(rank, -similarity): rank 0 exact, 1 prefix, 2 substring, 3 fuzzy; None if no match."""
    keys = [entry.repo_id.lower(), entry.repo_id.rsplit("/", 1)[-1].lower(), *(a.lower() for a in entry.aliases)]
    queries = {query, query.rsplit("/", 1)[-1]}
    norm_keys = [normalise_name(k) for k in keys]
    norm_queries = {normalise_name(q) for q in queries} - {""}
    similarity = max(difflib.SequenceMatcher(None, q, k).ratio() for q in queries for k in keys)
    if queries & set(keys) or norm_queries & set(norm_keys):
        return (0, -similarity)
    if any(k.startswith(q) for q in norm_queries for k in norm_keys):
        return (1, -similarity)
    if any(q in k for q in norm_queries for k in norm_keys) or query == entry.family.lower():
        return (2, -similarity)
    if similarity >= 0.6:
        return (3, -similarity)
    return None


def _suggestion_text(name: str, entries: list[CatalogEntry]) -> str:
    """'Catalog names close to it: a, b.' or a pointer to the full list."""
    candidates: dict[str, str] = {}  # lowercase -> repo id
    for entry in entries:
        candidates[entry.repo_id.lower()] = entry.repo_id
        candidates[entry.repo_id.rsplit("/", 1)[-1].lower()] = entry.repo_id
        for alias in entry.aliases:
            candidates[alias.lower()] = entry.repo_id
    query = name.lower()
    close = difflib.get_close_matches(query, candidates, n=8, cutoff=0.6)
    close += difflib.get_close_matches(query.rsplit("/", 1)[-1], candidates, n=8, cutoff=0.6)
    names = list(dict.fromkeys(candidates[c] for c in close))[:5]
    if names:
        return f"Catalog names close to it: {', '.join(names)}."
    return "No catalog name is close to it; the `models` command lists the bundled catalog."


# ---- Hub: names and environment ------------------------------------------------------------------


@dataclass(frozen=True)
class _HubRequest:
    """What to ask the Hub for: a repo, optionally a subfolder of it, with the user's token and revision."""

    repo_id: str
    subfolder: str | None
    token: str | None
    revision: str | None

    @property
    def name(self) -> str:
        return f"{self.repo_id}/{self.subfolder}" if self.subfolder else self.repo_id

    def path_of(self, filename: str) -> str:
        return f"{self.subfolder}/{filename}" if self.subfolder else filename


class _DeadlinePassed(Exception):
    """The Hub load's one deadline passed (raised in the caller, or in the worker between chunks)."""


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_HUB_ENDPOINT).rstrip("/")


def _offline() -> bool:
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return (flag or "").upper() in constants.ENV_VARS_TRUE_VALUES or constants.is_offline_mode()


def _hub_cache_dir() -> str:
    """HF cache folder, from the environment as it is now (huggingface_hub froze it at import)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return os.path.expandvars(os.path.expanduser(os.environ[variable]))
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expandvars(os.path.expanduser(os.environ["HF_HOME"])), "hub")
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def _strip_hub_url(model: str) -> str:
    """'https://huggingface.co/org/name' (as pasted from a browser) -> 'org/name'."""
    for prefix in (_endpoint() + "/", DEFAULT_HUB_ENDPOINT + "/", "https://hf.co/", "hf.co/", "huggingface.co/"):
        if model.startswith(prefix):
            return model[len(prefix) :].strip("/")
    return model


def _hub_request(
    name: str, entries: list[CatalogEntry], *, token: str | None, revision: str | None, allow_local: bool
) -> _HubRequest:
    """'org/name' or 'org/name/sub/dir' -> _HubRequest; ModelNotFoundError for anything else."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    parts = name.split("/")
    repo_id, subfolder = "/".join(parts[:2]), "/".join(parts[2:]) or None
    try:
        validate_repo_id(repo_id)
        if subfolder is not None and not all(_SAFE_PART.fullmatch(p) and p not in (".", "..") for p in parts[2:]):
            raise HFValidationError(subfolder)
    except HFValidationError:
        kinds = "a local path, a catalog name" if allow_local else "a catalog name"
        raise ModelNotFoundError(
            f"'{name}' is not {kinds} or a Hub repo id of the form 'org/name' (or 'org/name/subfolder').",
            hint=_suggestion_text(name, entries),
        ) from None
    return _HubRequest(repo_id=repo_id, subfolder=subfolder, token=token, revision=revision)


def _hub_source(endpoint: str, request: _HubRequest, commit: str | None, filename: str = CONFIG_FILENAME) -> str:
    ref = commit or request.revision or "main"
    url = f"{endpoint}/{request.repo_id}/blob/{ref}/{request.path_of(filename)}"
    if request.revision is not None and request.revision != ref:
        return f"{url} (revision '{request.revision}')"
    return url


# ---- Hub: one deadline, one size cap -------------------------------------------------------------


def _before_deadline(work: Callable[[], _T], deadline: float) -> _T:
    """Run ``work`` in a daemon thread and wait for it until ``deadline`` (time.monotonic()); _DeadlinePassed after.

    An abandoned thread finishes by itself: its requests have timeouts no longer than what was
    left of the deadline and it checks the deadline between chunks; its result is dropped.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as err:  # noqa: BLE001 (handed to the waiting caller as is)
            outcome["error"] = err

    worker = threading.Thread(target=run, name="planner-hub-fetch", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        raise _DeadlinePassed
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _remaining(deadline: float) -> float:
    """Seconds left, as a request timeout (at least 1 ms: zero would mean "no timeout" to some clients)."""
    return max(deadline - time.monotonic(), 0.001)


def _refuse_size(size_bytes: int | None, where: str) -> None:
    if size_bytes is not None and size_bytes > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{where} is {size_bytes / 2**20:.1f} MiB; a config.json is a few KiB (the limit is "
            f"{MAX_CONFIG_BYTES / 2**20:g} MiB).",
            hint="Check the repo id: this is not a model's config.json.",
        )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def _get_capped(url: str, asked_url: str, token: str | None, deadline: float, where: str) -> bytes:
    """GET ``url`` with the client's session: at most MAX_CONFIG_BYTES, done by ``deadline``; errors as the client's.

    The token goes only to the origin that was asked (a CDN location gets none), as hf_hub_download does.
    """
    from huggingface_hub import get_session
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    headers = build_hf_headers(token=token)
    if _origin(url) != _origin(asked_url):
        headers.pop("authorization", None)
    timeout = _remaining(deadline)
    with get_session().stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as response:
        declared = response.headers.get("Content-Length")
        declared_bytes = int(declared) if declared is not None and declared.isdigit() else None
        if response.status_code >= 400:
            if declared_bytes is not None and declared_bytes < 1_000_000:
                hf_raise_for_status(response)  # reads the (small) body for the server's message
            raise HfHubHTTPError(f"HTTP {response.status_code} from {url}", response=response)
        _refuse_size(declared_bytes, where)
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_CONFIG_BYTES:
                _refuse_size(len(body), f"{where} (still sending)")
            if time.monotonic() > deadline:
                raise _DeadlinePassed
        return bytes(body)


@dataclass(frozen=True)
class _Fetched:
    """One file from the Hub: its bytes and what identifies them."""

    data: bytes
    url: str
    commit: str
    etag: str
    cached_path: str | None  # set when the bytes came from the HF cache (same commit), no GET made


def _fetch(request: _HubRequest, filename: str, endpoint: str, cache_dir: str, deadline: float) -> _Fetched:
    """HEAD (commit, ETag, size), then the HF-cache copy of that commit or one capped GET; all by ``deadline``."""
    from huggingface_hub.errors import FileMetadataError
    from huggingface_hub.file_download import get_hf_file_metadata, hf_hub_url

    path_in_repo = request.path_of(filename)
    url = hf_hub_url(request.repo_id, path_in_repo, revision=request.revision, endpoint=endpoint)
    where = f"{path_in_repo} of {request.repo_id} from {url}"

    def work() -> _Fetched:
        meta = get_hf_file_metadata(url, token=request.token, timeout=_remaining(deadline), endpoint=endpoint)
        if meta.commit_hash is None or meta.etag is None:
            raise FileMetadataError(f"{url} answered without X-Repo-Commit or ETag")
        _refuse_size(meta.size, where)
        cached = _cached_file(request.repo_id, path_in_repo, meta.commit_hash, cache_dir)
        if cached is not None:
            return _Fetched(_read_capped(cached), url, meta.commit_hash, meta.etag, cached)
        data = _get_capped(meta.location, url, request.token, deadline, where)
        return _Fetched(data, url, meta.commit_hash, meta.etag, None)

    return _before_deadline(work, deadline)


def _list_files(request: _HubRequest, endpoint: str, deadline: float) -> list[str] | None:
    """Paths of the repo's files (the tree API's first page, up to 1,000 entries), or None if it cannot be had."""
    import httpx2

    ref = quote(request.revision or "main", safe="")
    url = f"{endpoint}/api/models/{request.repo_id}/tree/{ref}?recursive=true"
    where = f"file list of {request.repo_id} from {url}"
    try:
        data = _before_deadline(lambda: _get_capped(url, url, request.token, deadline, where), deadline)
        listing = parse_json(data, where, hint="")
    except (_DeadlinePassed, httpx2.HTTPError, OSError, ConfigError):
        return None
    if not isinstance(listing, list):
        return None
    files = [e for e in listing if isinstance(e, dict) and e.get("type") == "file"]
    return [e["path"] for e in files if isinstance(e.get("path"), str)]


# ---- Hub: the HF cache ---------------------------------------------------------------------------


def _read_capped(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read(MAX_CONFIG_BYTES + 1)


def _cached_file(repo_id: str, path_in_repo: str, revision: str | None, cache_dir: str) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, path_in_repo, cache_dir=cache_dir, revision=revision)
    return found if isinstance(found, str) and os.path.isfile(found) else None


def _store_in_cache(request: _HubRequest, filename: str, fetched: _Fetched, cache_dir: str) -> None:
    """Write a fetched file into the HF cache in its documented layout; best effort (a read-only cache is fine).

    Layout (huggingface.co/docs/huggingface_hub/guides/manage-cache): ``models--org--name/blobs/<etag>``
    holds the bytes, ``snapshots/<commit>/<path>`` links to the blob, ``refs/<branch>`` holds the commit.
    """
    from huggingface_hub import constants
    from huggingface_hub.file_download import REGEX_COMMIT_HASH, repo_folder_name

    if not REGEX_COMMIT_HASH.fullmatch(fetched.commit) or not _SAFE_PART.fullmatch(fetched.etag):
        return  # a commit or ETag that is not a plain name is not made into a file name
    folder = Path(cache_dir) / repo_folder_name(repo_id=request.repo_id, repo_type="model")
    blob = folder / "blobs" / fetched.etag
    pointer = folder / "snapshots" / fetched.commit / request.path_of(filename)
    try:
        if fetched.cached_path is None:
            blob.parent.mkdir(parents=True, exist_ok=True)
            partial = blob.with_name(f"{fetched.etag}.{uuid.uuid4().hex[:8]}.incomplete")
            partial.write_bytes(fetched.data)
            os.replace(partial, blob)
            pointer.parent.mkdir(parents=True, exist_ok=True)
            if not pointer.exists():
                try:
                    pointer.symlink_to(os.path.relpath(blob, pointer.parent))
                except OSError:
                    shutil.copyfile(blob, pointer)
        ref = request.revision or constants.DEFAULT_REVISION
        if ref != fetched.commit and _SAFE_REF.fullmatch(ref) and ".." not in ref:
            (folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
            (folder / "refs" / ref).write_text(fetched.commit)
    except OSError:
        return


def _commit_of(cached_path: str) -> str:
    """.../snapshots/<commit>/sub/config.json -> <commit>."""
    parts = Path(cached_path).parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts[:-1] else Path(cached_path).parent.name


# ---- Hub: the answer -----------------------------------------------------------------------------


def _from_hub(
    request: _HubRequest, entries: list[CatalogEntry], *, catalog_dir: str | Path | None, timeout_s: float
) -> LoadedConfig:
    """The Hub's config.json (or params.json) for ``request``, all requests within ``timeout_s`` together."""
    import httpx2
    from huggingface_hub.errors import (
        FileMetadataError,
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = _endpoint()
    if _offline():
        return _fallback(request, _OFFLINE_REASON, entries, catalog_dir, endpoint)

    cache_dir = _hub_cache_dir()
    deadline = time.monotonic() + timeout_s

    def fallback(reason: str) -> LoadedConfig:
        return _fallback(request, reason, entries, catalog_dir, endpoint)

    try:
        return _hub_answer(request, entries, endpoint=endpoint, cache_dir=cache_dir, deadline=deadline)
    except GatedRepoError as err:  # before RepositoryNotFoundError: it is a subclass
        cached = _cached_file(request.repo_id, request.path_of(CONFIG_FILENAME), request.revision, cache_dir)
        if cached is not None:
            warning = f"{_gated_message(request.repo_id, err.response.status_code, endpoint)} Using the cached copy."
            return _from_cached(request, cached, endpoint, warning)
        raise GatedModelError(
            _gated_message(request.repo_id, err.response.status_code, endpoint),
            hint=_gated_hint(request.repo_id, endpoint),
        ) from err
    except RepositoryNotFoundError as err:
        raise _not_found(request.repo_id, endpoint, entries) from err
    except RevisionNotFoundError as err:
        raise ModelNotFoundError(
            f"repo '{request.repo_id}' has no revision '{request.revision}' on the Hub (HF_ENDPOINT={endpoint}).",
            hint="Check the branch, tag or commit, or leave the revision out to use main.",
        ) from err
    except RemoteEntryNotFoundError as err:  # the listing named params.json, and then it was not there
        raise _no_config_json(request, None) from err
    except HfHubHTTPError as err:
        status = err.response.status_code
        if status in (401, 403):
            raise GatedModelError(
                f"the Hub refused access to '{request.repo_id}' (HTTP {status}); it is private or gated.",
                hint=_gated_hint(request.repo_id, endpoint),
            ) from err
        if status == 404:
            raise _not_found(request.repo_id, endpoint, entries) from err
        return fallback(f"HTTP {status} from {endpoint}")
    except (_DeadlinePassed, httpx2.TimeoutException):
        return fallback(f"timeout after {timeout_s:g} s")
    except OfflineModeIsEnabled:
        return fallback(_OFFLINE_REASON)
    except httpx2.ProxyError:
        return fallback("proxy error")
    except (httpx2.TransportError, httpx2.TooManyRedirects, httpx2.DecodingError):
        return fallback(f"cannot connect to {endpoint}")
    except FileMetadataError:
        return fallback(f"{endpoint} did not answer like a Hub (no X-Repo-Commit or ETag)")
    except OSError as err:  # the cache folder or the connection failed under us
        return fallback(f"download failed: {type(err).__name__}")


def _hub_answer(
    request: _HubRequest, entries: list[CatalogEntry], *, endpoint: str, cache_dir: str, deadline: float
) -> LoadedConfig:
    """config.json of the request, else (no such file) params.json or a list of the config.json files there are."""
    from huggingface_hub.errors import RemoteEntryNotFoundError

    try:
        fetched = _fetch(request, CONFIG_FILENAME, endpoint, cache_dir, deadline)
    except RemoteEntryNotFoundError as err:
        files = _list_files(request, endpoint, deadline)
        if files is not None and request.path_of(PARAMS_FILENAME) in files:
            return _from_params_json(request, endpoint, cache_dir, deadline)
        raise _no_config_json(request, files) from err
    config = _parse_config(fetched.data, f"{request.path_of(CONFIG_FILENAME)} of {request.repo_id} from {fetched.url}")
    _store_in_cache(request, CONFIG_FILENAME, fetched, cache_dir)
    return LoadedConfig(
        config=config, name=request.name, origin="hub", source=_hub_source(endpoint, request, fetched.commit)
    )


def _from_params_json(request: _HubRequest, endpoint: str, cache_dir: str, deadline: float) -> LoadedConfig:
    fetched = _fetch(request, PARAMS_FILENAME, endpoint, cache_dir, deadline)
    where = f"{request.path_of(PARAMS_FILENAME)} of {request.repo_id} from {fetched.url}"
    params = parse_json(fetched.data, where, hint="Give a config.json for the model instead.")
    config, notes = mistral_params_to_config(params, where)
    _store_in_cache(request, PARAMS_FILENAME, fetched, cache_dir)
    note = (
        f"'{request.name}' has no {CONFIG_FILENAME}; read its Mistral {PARAMS_FILENAME}, with keys translated "
        "as vLLM's Mistral config adapter does."
    )
    return LoadedConfig(
        config=config,
        name=request.name,
        origin="hub",
        source=_hub_source(endpoint, request, fetched.commit, PARAMS_FILENAME),
        warnings=[note, *notes],
    )


def _no_config_json(request: _HubRequest, files: list[str] | None) -> ModelNotFoundError:
    """The repo (folder) has no config.json: name the config.json files it does have, or what it holds."""
    wanted = request.path_of(CONFIG_FILENAME)
    at_revision = f" at revision {request.revision!r}" if request.revision else ""
    configs = sorted(f for f in files or [] if f.rsplit("/", 1)[-1] == CONFIG_FILENAME and f != wanted)
    if configs:
        shown = ", ".join(configs[:LISTED_NAMES_SHOWN]) + (", ..." if len(configs) > LISTED_NAMES_SHOWN else "")
        example = f"{request.repo_id}/{configs[0].rsplit('/', 1)[0]}" if "/" in configs[0] else request.repo_id
        return ModelNotFoundError(
            f"repo '{request.repo_id}' on the Hub has no {wanted}{at_revision}; it has {len(configs)} "
            f"config.json file(s) elsewhere: {shown}.",
            hint=f"Give the one to plan with as 'org/name/subfolder', e.g. '{example}'.",
        )
    holds = ""
    if files:
        more = ", ..." if len(files) > LISTED_NAMES_SHOWN else ""
        holds = f" Its files: {', '.join(files[:LISTED_NAMES_SHOWN])}{more}."
    return ModelNotFoundError(
        f"repo '{request.repo_id}' on the Hub has no {wanted}{at_revision}; it may hold only GGUF or other "
        f"non-Transformers files.{holds}",
        hint="Use the original Transformers repo the weights were made from (its model card usually "
        "names it), or give a path to a config.json.",
    )


def _from_cached(request: _HubRequest, path: str, endpoint: str, warning: str) -> LoadedConfig:
    commit = _commit_of(path)
    where = f"cached {request.path_of(CONFIG_FILENAME)} of {request.repo_id} at {path}"
    config = _parse_config(_read_capped(path), where)
    source = f"HF cache copy of {_hub_source(endpoint, request, commit)} ({path})"
    return LoadedConfig(config=config, name=request.name, origin="hub-cache", source=source, warnings=[warning])


def _fallback(
    request: _HubRequest,
    reason: str,
    entries: list[CatalogEntry],
    catalog_dir: str | Path | None,
    endpoint: str,
) -> LoadedConfig:
    """The Hub could not answer: HF-cache copy, else catalog copy, else HubUnavailableError."""
    unreachable = "Hub not asked" if reason == _OFFLINE_REASON else "Hub unreachable"
    cached = _cached_file(request.repo_id, request.path_of(CONFIG_FILENAME), request.revision, _hub_cache_dir())
    if cached is not None:
        commit = _commit_of(cached)[:12]
        warning = f"{unreachable} ({reason}); using the cached copy of {request.name} (commit {commit})."
        return _from_cached(request, cached, endpoint, warning)
    entry = _find_entry(request.name, entries)
    if entry is not None:
        pinned = f"; revision '{request.revision}' not checked" if request.revision is not None else ""
        warning = f"{unreachable} ({reason}); using the bundled catalog copy of {entry.repo_id}{pinned}."
        return _from_catalog(entry, catalog_dir, warnings=[warning])
    if reason == _OFFLINE_REASON:
        raise HubUnavailableError(
            f"{_OFFLINE_REASON} and there is no cached or catalog copy of '{request.name}'.",
            hint="Unset HF_HUB_OFFLINE to fetch it, or pass a path to a local config.json.",
        )
    raise HubUnavailableError(
        f"cannot get '{request.name}' from the Hub at {endpoint} ({reason}), and there is no cached or catalog copy.",
        hint="Check the network, proxy and HF_ENDPOINT, or pass a path to a local config.json.",
    )


def _gated_message(repo_id: str, status: int, endpoint: str) -> str:
    if status == 403:
        return f"'{repo_id}' is gated and the token sent has no access to it (HTTP 403 from {endpoint})."
    return f"'{repo_id}' is gated and no valid token was sent (HTTP {status} from {endpoint})."


def _gated_hint(repo_id: str, endpoint: str) -> str:
    return f"Accept its license at {endpoint}/{repo_id} and set HF_TOKEN or pass --hf-token."


def _not_found(repo_id: str, endpoint: str, entries: list[CatalogEntry]) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"no repo '{repo_id}' on the Hub (HF_ENDPOINT={endpoint}).",
        hint="Check the id, or give a path to a config.json; if the repo is private, set HF_TOKEN or pass "
        f"--hf-token. {_suggestion_text(repo_id, entries)}",
    )


# ---- Mistral params.json -------------------------------------------------------------------------

MISTRAL_KEYS: dict[str, str] = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "hidden_dim": "intermediate_size",
    "norm_eps": "rms_norm_eps",
    "tied_embeddings": "tie_word_embeddings",
}
"""params.json key -> config.json key. Fact source: vLLM's Mistral config adapter,
``vllm/transformers_utils/configs/mistral.py`` (``_remap_general_mistral_args``); ``head_dim``,
``vocab_size``, ``rope_theta`` and ``sliding_window`` have the same name in both."""

MISTRAL_MOE_KEYS: dict[str, str] = {"num_experts": "num_local_experts", "num_experts_per_tok": "num_experts_per_tok"}
"""``moe`` of a Mixtral-style params.json -> Mixtral config.json keys (vLLM reads it as MixtralForCausalLM)."""

MISTRAL_DEFAULT_MAX_LEN = 128_000
"""vLLM's max_position_embeddings for a params.json that states none (same adapter)."""

_MISTRAL_UNTRANSLATED = {
    "qk_nope_head_dim": "multi-head latent attention (vLLM reads it as DeepSeek-V3)",
    "vision_encoder": "a vision encoder (Pixtral)",
    "multimodal": "a vision or audio encoder (Pixtral, Voxtral)",
    "llama_4_scaling": "Llama-4 attention scaling (Mistral Large 3)",
}


def mistral_params_to_config(params: Any, where: str) -> tuple[dict[str, Any], list[str]]:
    """A Mistral ``params.json`` -> (config.json-style dict for the mistral or mixtral family, notes).

    Keys are renamed by ``MISTRAL_KEYS`` (and ``MISTRAL_MOE_KEYS`` inside ``moe``); other keys are
    kept as they are, as vLLM does. Refused with the key named (ConfigError): a non-object, and the
    variants vLLM turns into other architectures (MLA, shared experts, vision, audio, Mamba), which
    need their own config.json. Worked example, Mistral-7B-Instruct-v0.3's params.json:
    ``{"dim": 4096, "n_layers": 32, "head_dim": 128, "hidden_dim": 14336, "n_heads": 32,
    "n_kv_heads": 8, "norm_eps": 1e-05, "vocab_size": 32768, "rope_theta": 1000000.0}`` ->
    ``hidden_size`` 4096, ``num_hidden_layers`` 32, ``intermediate_size`` 14336, ... as in its config.json.
    """
    hint = "Give the model's config.json (a Transformers conversion of the repo usually has one)."
    if not isinstance(params, dict):
        raise ConfigError(f"{where} is not a JSON object; a Mistral params.json is one.", hint=hint)
    for key, what in _MISTRAL_UNTRANSLATED.items():
        if params.get(key):
            raise ConfigError(f"{where} has '{key}': {what}, which is not translated from params.json.", hint=hint)
    if params.get("model_type") == "mamba":
        raise ConfigError(
            f"{where} has 'model_type': 'mamba' (Mamba2), which is not translated from params.json.", hint=hint
        )
    keyed: dict[str, Any] = params  # a JSON object's keys are strings
    config = {MISTRAL_KEYS.get(key, key): value for key, value in keyed.items() if key not in ("moe", "quantization")}
    notes: list[str] = []
    moe = params.get("moe")
    if moe:
        config.update(_mistral_moe(moe, where, hint))
    family, architecture = ("mixtral", "MixtralForCausalLM") if moe else ("mistral", "MistralForCausalLM")
    config["model_type"], config["architectures"] = family, [architecture]
    if params.get("quantization"):
        config["quantization_config"] = _mistral_quantization(params["quantization"], where, hint)
    if isinstance(params.get("sliding_window"), list):
        config.update(_mistral_window_pattern(params["sliding_window"], config.get("num_hidden_layers"), where, hint))
    if "max_position_embeddings" not in config:
        length = params.get("max_seq_len")
        stated = isinstance(length, int) and not isinstance(length, bool) and length > 0
        config["max_position_embeddings"] = length if stated else MISTRAL_DEFAULT_MAX_LEN
        if not stated:
            notes.append(
                f"{PARAMS_FILENAME} states no context length; planned with {MISTRAL_DEFAULT_MAX_LEN:,} tokens, "
                "vLLM's default for it. Set max_model_len to the model card's figure."
            )
    return config, notes


def _mistral_moe(moe: Any, where: str, hint: str) -> dict[str, Any]:
    if not isinstance(moe, dict):
        raise ConfigError(f"{where}: 'moe' is {type(moe).__name__}, not an object.", hint=hint)
    if moe.get("num_shared_experts"):
        raise ConfigError(
            f"{where}: 'moe.num_shared_experts' is {moe['num_shared_experts']!r}: Mistral Large 3 style MoE "
            "(vLLM reads it as DeepSeek-V3), which is not translated from params.json.",
            hint=hint,
        )
    missing = [key for key in MISTRAL_MOE_KEYS if key not in moe]
    if missing:
        raise ConfigError(f"{where}: 'moe' has no {', '.join(repr(k) for k in missing)}.", hint=hint)
    return {new: moe[old] for old, new in MISTRAL_MOE_KEYS.items()}


def _mistral_quantization(quantization: Any, where: str, hint: str) -> dict[str, Any]:
    """params.json ``quantization`` -> ``quantization_config``, as vLLM's adapter reads it (fp8, compressed-tensors)."""
    if not isinstance(quantization, dict):
        raise ConfigError(f"{where}: 'quantization' is {type(quantization).__name__}, not an object.", hint=hint)
    if quantization.get("qformat_weight") == "fp8_e4m3":
        dynamic = quantization.get("qscheme_act") == "NO_SCALES"
        return {"quant_method": "fp8", "activation_scheme": "dynamic" if dynamic else "static"}
    if str(quantization.get("quant_method", "")).lower().replace("_", "-") == "compressed-tensors":
        return {**quantization, "quant_method": "compressed-tensors"}
    raise ConfigError(
        f"{where}: 'quantization' {quantization!r} is neither fp8_e4m3 weights nor compressed-tensors.", hint=hint
    )


def _mistral_window_pattern(pattern: list[Any], num_layers: Any, where: str, hint: str) -> dict[str, Any]:
    """``sliding_window: [4096, null, ...]`` (a per-layer pattern, repeated) -> layer_types + one window."""
    windows = {w for w in pattern if w is not None}
    if not pattern or len(windows) > 1 or not all(isinstance(w, int) for w in windows):
        raise ConfigError(
            f"{where}: 'sliding_window' {pattern!r} is not a pattern of one window size and nulls.", hint=hint
        )
    if not isinstance(num_layers, int) or num_layers <= 0 or num_layers % len(pattern):
        raise ConfigError(
            f"{where}: 'n_layers' {num_layers!r} is not a positive multiple of the sliding_window pattern's "
            f"{len(pattern)} entries.",
            hint=hint,
        )
    repeated = pattern * (num_layers // len(pattern))
    layer_types = ["full_attention" if w is None else "sliding_attention" for w in repeated]
    return {"layer_types": layer_types, "sliding_window": next(iter(windows), None)}
