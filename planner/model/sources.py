"""Where a model's config.json comes from: a local file, the bundled catalog, the Hub, its cache, or an upload.

``load_config(model)`` answers with the raw config dict plus where it came from, so every
plan can cite its source. Resolution order:

1. ``model`` is an existing path: a config.json file, or a folder holding one.
2. ``prefer="auto"`` and no ``revision``: a catalog hit (repo id, case-insensitive, or an
   alias) is answered from ``planner/model/catalog/`` with no network at all, so the app
   works offline and instantly for the common models.
3. The Hub: ``hf_hub_download(repo_id, "config.json")`` into the normal HF cache. Only
   config.json is fetched; no weights, no remote code.
4. The Hub failed for a reason that is not the user's (timeout, no connection, 5xx,
   HF_HUB_OFFLINE): the HF-cache copy, else the catalog copy, each with a warning; else
   ``HubUnavailableError``. A missing repo, a gated repo or a repo without config.json is
   the user's to fix and raises at once (a gated repo still falls back to a cached copy).

Why a HEAD probe precedes ``hf_hub_download``: when nothing is cached and the first HEAD
times out, huggingface_hub (2.4) retries it with a 60 s timeout and five backed-off retries,
so one call can take minutes whatever ``etag_timeout`` says. The probe is a single HEAD
bounded by ``timeout_s``; it also tells a fresh Hub answer ("hub") from a silent fallback to
the cache ("hub-cache"). The cost is one extra HEAD when the Hub is reachable; a cached
config.json is still not downloaded again.

Environment read at call time (not at import, unlike huggingface_hub's constants):
HF_ENDPOINT, HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, HF_HUB_CACHE / HF_HOME. HF_TOKEN and the
saved login are looked up by huggingface_hub itself when ``token`` is None. Tokens never
appear in messages.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

import httpx2
import yaml
from huggingface_hub import HfApi, constants, hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import (
    FileMetadataError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import get_hf_file_metadata, hf_hub_url
from huggingface_hub.utils import validate_repo_id
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import ConfigError, GatedModelError, HubUnavailableError, ModelNotFoundError

DEFAULT_CATALOG_DIR = Path(__file__).parent / "catalog"
"""Bundled catalog: ``index.yaml`` plus one verbatim ``<org>--<name>.json`` per model."""

DEFAULT_HUB_ENDPOINT = "https://huggingface.co"
CONFIG_FILENAME = "config.json"
MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""A config.json is a few KiB (the largest multimodal ones ~100 KiB); 4 MiB means a wrong file."""

Origin = Literal["catalog", "hub", "hub-cache", "file", "upload"]
Prefer = Literal["auto", "hub", "catalog"]
_OFFLINE_REASON = "HF_HUB_OFFLINE is set"


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

    config: dict[str, Any] = Field(description="The config.json as parsed, unmodified.")
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


# ---- public API ----------------------------------------------------------------------------------


def load_config(
    model: str,
    *,
    token: str | None = None,
    revision: str | None = None,
    prefer: Prefer = "auto",
    catalog_dir: str | Path | None = None,
    timeout_s: float = 10.0,
) -> LoadedConfig:
    """Find ``model``'s config.json: local path, then catalog, then the Hub (see the module docstring).

    ``prefer="hub"`` asks the Hub first even for catalog models (aliases still resolve to their
    repo id) and falls back to cache and catalog only when the Hub cannot be reached.
    ``prefer="catalog"`` never touches the network. Passing ``revision`` skips the catalog in
    "auto" mode, since the catalog copy is of one fixed commit.
    """
    if prefer not in ("auto", "hub", "catalog"):
        raise ValueError(f"prefer must be 'auto', 'hub' or 'catalog', not {prefer!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, not {timeout_s!r}")
    model = str(model).strip()
    if not model:
        raise ModelNotFoundError("No model given.", hint="Pass a Hub repo id, a catalog name or a path to a config.json.")

    local = _load_local(model)
    if local is not None:
        return local

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
    return _from_hub(repo_id, entries, token=token, revision=revision, catalog_dir=catalog_dir, timeout_s=timeout_s)


def load_uploaded(data: bytes, filename: str) -> LoadedConfig:
    """Parse a config.json uploaded in the app; ConfigError if it is not one."""
    where = f"uploaded file '{filename}'"
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{where} is {len(data) / 2**20:.1f} MiB; a config.json is a few KiB.",
            hint="Upload the model's config.json, not its weights or tokenizer.json.",
        )
    config = _parse_config(data, where)
    return LoadedConfig(config=config, name=filename, origin="upload", source=where)


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
    """
    if _offline():
        return None
    try:
        validate_repo_id(repo_id)
        api = HfApi(endpoint=_endpoint(), token=token)
        metadata = api.get_safetensors_metadata(repo_id, revision=revision, timeout=timeout_s)
        return {str(dtype): int(count) for dtype, count in metadata.parameter_count.items()}
    except Exception:  # noqa: BLE001 (optional enrichment: any failure means "unknown")
        return None


# ---- local files ---------------------------------------------------------------------------------


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
        if model.endswith(".json") or model.startswith(("/", "./", "../", "~", ".\\")):
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
    config = _parse_config(path.read_bytes(), str(path))
    return LoadedConfig(config=config, name=model, origin="file", source=str(path.resolve()))


def _parse_config(data: bytes, where: str) -> dict[str, Any]:
    """Bytes -> config dict, or ConfigError naming ``where`` and the position of the problem."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{where} is not UTF-8 text (bad byte at offset {err.start}); a config.json is JSON text.",
            hint="Give the model's config.json.",
        ) from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{where} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}.",
            hint="Give the model's config.json as published with the model.",
        ) from None
    if not isinstance(config, dict):
        kind = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
        raise ConfigError(
            f"{where} holds a JSON {kind.get(type(config), 'null')}, but a config.json is a JSON object.",
            hint="Give the model's config.json.",
        )
    if "model_type" not in config and "architectures" not in config:
        raise ConfigError(
            f"{where} is a JSON object without 'model_type' or 'architectures', so it is not a "
            "Transformers config.json (tokenizer, generation or adapter configs look like this).",
            hint="Give the model's config.json.",
        )
    return config


# ---- catalog -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _read_index(index_path: str, mtime_ns: int, size: int) -> tuple[CatalogEntry, ...]:
    """Parse and check index.yaml; cached per (path, mtime, size) so edits are picked up."""
    try:
        raw = yaml.safe_load(Path(index_path).read_text(encoding="utf-8"))
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


def _normalise(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _match_score(query: str, entry: CatalogEntry) -> tuple[int, float] | None:
    """(rank, -similarity): rank 0 exact, 1 prefix, 2 substring, 3 fuzzy; None if no match."""
    keys = [entry.repo_id.lower(), entry.repo_id.rsplit("/", 1)[-1].lower(), *(a.lower() for a in entry.aliases)]
    queries = {query, query.rsplit("/", 1)[-1]}
    norm_keys = [_normalise(k) for k in keys]
    norm_queries = {_normalise(q) for q in queries} - {""}
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


# ---- Hub -----------------------------------------------------------------------------------------


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_HUB_ENDPOINT).rstrip("/")


def _offline() -> bool:
    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return (flag or "").upper() in constants.ENV_VARS_TRUE_VALUES or constants.is_offline_mode()


def _hub_cache_dir() -> str:
    """HF cache folder, from the environment as it is now (huggingface_hub froze it at import)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return os.path.expandvars(os.path.expanduser(os.environ[variable]))
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expandvars(os.path.expanduser(os.environ["HF_HOME"])), "hub")
    return constants.HF_HUB_CACHE


def _strip_hub_url(model: str) -> str:
    """'https://huggingface.co/org/name' (as pasted from a browser) -> 'org/name'."""
    for prefix in (_endpoint() + "/", DEFAULT_HUB_ENDPOINT + "/", "https://hf.co/", "hf.co/", "huggingface.co/"):
        if model.startswith(prefix):
            return model[len(prefix) :].strip("/")
    return model


def _hub_source(endpoint: str, repo_id: str, commit: str | None, revision: str | None) -> str:
    ref = commit or revision or "main"
    url = f"{endpoint}/{repo_id}/blob/{ref}/{CONFIG_FILENAME}"
    if revision is not None and revision != ref:
        return f"{url} (revision '{revision}')"
    return url


def _from_hub(
    repo_id: str,
    entries: list[CatalogEntry],
    *,
    token: str | None,
    revision: str | None,
    catalog_dir: str | Path | None,
    timeout_s: float,
) -> LoadedConfig:
    endpoint = _endpoint()
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise ModelNotFoundError(
            f"'{repo_id}' is not a local path, a catalog name or a Hub repo id of the form 'org/name'.",
            hint=_suggestion_text(repo_id, entries),
        ) from None

    if _offline():
        return _fallback(repo_id, _OFFLINE_REASON, entries, revision, catalog_dir, endpoint)

    cache_dir = _hub_cache_dir()
    url = hf_hub_url(repo_id, CONFIG_FILENAME, revision=revision, endpoint=endpoint)
    try:
        probe = get_hf_file_metadata(url, token=token, timeout=timeout_s, endpoint=endpoint)
        path = hf_hub_download(
            repo_id,
            CONFIG_FILENAME,
            revision=revision,
            token=token,
            endpoint=endpoint,
            etag_timeout=timeout_s,
            cache_dir=cache_dir,
        )
    except GatedRepoError as err:  # before RepositoryNotFoundError: it is a subclass
        cached = _cached_path(repo_id, revision, cache_dir)
        if cached is not None:
            warning = f"{_gated_message(repo_id, err.response.status_code, endpoint)} Using the cached copy."
            return _from_cached(repo_id, cached, revision, endpoint, warning)
        raise GatedModelError(
            _gated_message(repo_id, err.response.status_code, endpoint), hint=_gated_hint(repo_id, endpoint)
        ) from err
    except RepositoryNotFoundError as err:
        raise _not_found(repo_id, endpoint, entries) from err
    except RevisionNotFoundError as err:
        raise ModelNotFoundError(
            f"repo '{repo_id}' has no revision '{revision}' on the Hub (HF_ENDPOINT={endpoint}).",
            hint="Check the branch, tag or commit, or leave the revision out to use main.",
        ) from err
    except RemoteEntryNotFoundError as err:
        raise ModelNotFoundError(
            f"repo '{repo_id}' on the Hub has no {CONFIG_FILENAME}"
            f"{f' at revision {revision!r}' if revision else ''}; it may hold only GGUF or other "
            "non-Transformers files.",
            hint="Use the original Transformers repo the weights were made from (its model card usually "
            "names it), or give a path to a config.json.",
        ) from err
    except HfHubHTTPError as err:
        status = err.response.status_code
        if status in (401, 403):
            raise GatedModelError(
                f"the Hub refused access to '{repo_id}' (HTTP {status}); it is private or gated.",
                hint=_gated_hint(repo_id, endpoint),
            ) from err
        if status == 404:
            raise _not_found(repo_id, endpoint, entries) from err
        return _fallback(repo_id, f"HTTP {status} from {endpoint}", entries, revision, catalog_dir, endpoint)
    except httpx2.TimeoutException:
        return _fallback(repo_id, f"timeout after {timeout_s:g} s", entries, revision, catalog_dir, endpoint)
    except OfflineModeIsEnabled:
        return _fallback(repo_id, _OFFLINE_REASON, entries, revision, catalog_dir, endpoint)
    except httpx2.ProxyError:
        return _fallback(repo_id, "proxy error", entries, revision, catalog_dir, endpoint)
    except (httpx2.TransportError, httpx2.TooManyRedirects):
        return _fallback(repo_id, f"cannot connect to {endpoint}", entries, revision, catalog_dir, endpoint)
    except FileMetadataError:
        reason = f"{endpoint} did not answer like a Hub (no X-Repo-Commit or ETag)"
        return _fallback(repo_id, reason, entries, revision, catalog_dir, endpoint)
    except OSError as err:  # the download after a good probe failed: disk, or the GET broke off
        return _fallback(repo_id, f"download failed: {type(err).__name__}", entries, revision, catalog_dir, endpoint)

    config = _parse_config(Path(path).read_bytes(), f"{CONFIG_FILENAME} of {repo_id} from {url}")
    commit = probe.commit_hash or Path(path).parent.name
    return LoadedConfig(
        config=config, name=repo_id, origin="hub", source=_hub_source(endpoint, repo_id, commit, revision)
    )


def _cached_path(repo_id: str, revision: str | None, cache_dir: str) -> str | None:
    found = try_to_load_from_cache(repo_id, CONFIG_FILENAME, cache_dir=cache_dir, revision=revision)
    return found if isinstance(found, str) else None


def _from_cached(repo_id: str, path: str, revision: str | None, endpoint: str, warning: str) -> LoadedConfig:
    commit = Path(path).parent.name  # .../snapshots/<commit>/config.json
    config = _parse_config(Path(path).read_bytes(), f"cached {CONFIG_FILENAME} of {repo_id} at {path}")
    source = f"HF cache copy of {_hub_source(endpoint, repo_id, commit, revision)} ({path})"
    return LoadedConfig(config=config, name=repo_id, origin="hub-cache", source=source, warnings=[warning])


def _fallback(
    repo_id: str,
    reason: str,
    entries: list[CatalogEntry],
    revision: str | None,
    catalog_dir: str | Path | None,
    endpoint: str,
) -> LoadedConfig:
    """The Hub could not answer: HF-cache copy, else catalog copy, else HubUnavailableError."""
    unreachable = "Hub not asked" if reason == _OFFLINE_REASON else "Hub unreachable"
    cached = _cached_path(repo_id, revision, _hub_cache_dir())
    if cached is not None:
        commit = Path(cached).parent.name
        warning = f"{unreachable} ({reason}); using the cached copy of {repo_id} (commit {commit[:12]})."
        return _from_cached(repo_id, cached, revision, endpoint, warning)
    entry = _find_entry(repo_id, entries)
    if entry is not None:
        pinned = f"; revision '{revision}' not checked" if revision is not None else ""
        warning = f"{unreachable} ({reason}); using the bundled catalog copy of {entry.repo_id}{pinned}."
        return _from_catalog(entry, catalog_dir, warnings=[warning])
    if reason == _OFFLINE_REASON:
        raise HubUnavailableError(
            f"{_OFFLINE_REASON} and there is no cached or catalog copy of '{repo_id}'.",
            hint="Unset HF_HUB_OFFLINE to fetch it, or pass a path to a local config.json.",
        )
    raise HubUnavailableError(
        f"cannot get '{repo_id}' from the Hub at {endpoint} ({reason}), and there is no cached or catalog copy.",
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
