"""The shared scenario inputs: one row per sidebar widget, its default, and its URL codec.

Each input lives in ``st.session_state[key]`` and, when it differs from its default, in the URL
as ``?key=value``, so a link reopens the exact plan. Binding runs both ways:

* ``seed_from_url()`` (first run of a session): every known query parameter is parsed and
  checked (a GPU id must exist, a number must be in range) and written to session state before
  the widgets are drawn; a bad value is dropped from the URL with a warning, never an exception.
* ``sync_url()`` (end of every run): the URL gets every input that differs from its default and
  loses the ones equal to it; parameters owned by other pages are left alone.

The HF token and an uploaded config.json are deliberately not here: the token must never reach
a URL, and an upload cannot travel in one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from planner.errors import PlannerError
from planner.estimate.memory import KV_DTYPES
from planner.hardware import load_profiles
from planner.model.quantization import NAMED_FORMATS
from planner.model.sources import catalog_entries, check_remote_name
from planner.scenario import Scenario, Workload
from ui.errors import plain

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B"
DEFAULT_MAX_MODEL_LEN = 8192
WEIGHT_DTYPES: tuple[str, ...] = ("auto", *NAMED_FORMATS)
HIGH_PRECISION_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "int8")
LOW_PRECISION_DTYPES: tuple[str, ...] = ("fp8", "int8", "int4", "awq", "gptq", "mxfp4", "nvfp4", "nf4")
BLOCK_SIZES: tuple[int | None, ...] = (None, 8, 16, 32, 64, 128)
ENGINES: tuple[str, ...] = ("cuda-graphs", "eager")
SEEDED_KEY = "_ui_url_seeded"
URL_WARNINGS_KEY = "_ui_url_warnings"


@dataclass(frozen=True)
class Param:
    """One shared input: session-state key (= query parameter), default, and how it reads from a URL."""

    key: str
    default: Any
    parse: Callable[[str], Any]
    help: str = ""

    def dump(self, value: Any) -> str:
        if isinstance(value, bool):
            return "1" if value else "0"
        return "auto" if value is None else str(value)


def _int(low: int = 1, high: int = 10**9) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"must be between {low:,} and {high:,}")
        return value

    return parse


def _optional_int(low: int = 1) -> Callable[[str], int | None]:
    whole = _int(low)

    def parse(text: str) -> int | None:
        return None if text in ("", "auto", "none", "None") else whole(text)

    return parse


def _fraction(text: str) -> float:
    value = round(float(text), 2)
    if not 0.5 <= value <= 1.0:
        raise ValueError("must be between 0.50 and 1.00")
    return value


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be 1 or 0")


def _one_of(options: Callable[[], tuple[Any, ...]], convert: Callable[[str], Any] = str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = convert(text)
        known = options()
        if value not in known:
            shown = ", ".join(str(o) for o in known[:12]) + (", ..." if len(known) > 12 else "")
            raise ValueError(f"must be one of {shown}")
        return value

    return parse


def catalog_ids() -> tuple[str, ...]:
    """Repo ids of the bundled catalog, in the catalog's order."""
    return tuple(entry.repo_id for entry in catalog_entries())


def gpu_ids() -> tuple[str, ...]:
    """Hardware profile ids, sorted."""
    return tuple(sorted(load_profiles()))


def _remote_name(text: str) -> str:
    """A catalog name or Hub repo id from the link; never a path on the server (those come by upload)."""
    text = text.strip()
    if not text:
        return text
    try:
        return check_remote_name(text)
    except PlannerError as err:
        raise ValueError(err.message) from None


def _block(text: str) -> int | None:
    return _one_of(lambda: BLOCK_SIZES, lambda t: None if t in ("", "auto") else int(t))(text)


def _help(model: type, field: str) -> str:
    return model.model_fields[field].description or ""


_S, _W = Scenario.model_fields, Workload.model_fields

PARAMS: tuple[Param, ...] = (
    Param("model", DEFAULT_MODEL, _one_of(catalog_ids), "A model from the bundled catalog (type to search)."),
    Param("repo", "", _remote_name, "Any Hugging Face Hub repo id, e.g. 'Qwen/Qwen2.5-7B' (or 'org/name/subfolder'); overrides the catalog pick."),
    Param("gpu", _S["gpu"].default, _one_of(gpu_ids), _help(Scenario, "gpu")),
    Param("gpus", _S["num_gpus"].default, _optional_int(), _help(Scenario, "num_gpus")),
    Param("tp", _S["tp"].default, _int(1, 1024), _help(Scenario, "tp")),
    Param("pp", _S["pp"].default, _int(1, 1024), _help(Scenario, "pp")),
    Param("weights", _S["weight_dtype"].default, _one_of(lambda: WEIGHT_DTYPES), _help(Scenario, "weight_dtype")),
    Param("mixed", False, _bool, "Mixed precision: attention and lm_head at a high precision, MLP and experts at a low one."),
    Param("hi", "bf16", _one_of(lambda: HIGH_PRECISION_DTYPES), "Precision of attention and lm_head in mixed precision."),
    Param("lo", "int4", _one_of(lambda: LOW_PRECISION_DTYPES), "Precision of the MLP and the experts in mixed precision."),
    Param("kv", _S["kv_cache_dtype"].default, _one_of(lambda: KV_DTYPES), _help(Scenario, "kv_cache_dtype")),
    Param("len", DEFAULT_MAX_MODEL_LEN, _optional_int(), _help(Scenario, "max_model_len")),
    Param("util", _S["gpu_memory_utilization"].default, _fraction, _help(Scenario, "gpu_memory_utilization")),
    Param("block", _S["block_size"].default, _block, _help(Scenario, "block_size")),
    Param("seqs", _S["max_num_seqs"].default, _optional_int(), _help(Scenario, "max_num_seqs")),
    Param("tokens", _S["max_num_batched_tokens"].default, _optional_int(), _help(Scenario, "max_num_batched_tokens")),
    Param("engine", _S["engine"].default, _one_of(lambda: ENGINES), _help(Scenario, "engine")),
    Param("chunked", _S["enable_chunked_prefill"].default, _bool, _help(Scenario, "enable_chunked_prefill")),
    Param("in", _W["input_len"].default, _int(), _help(Workload, "input_len")),
    Param("out", _W["output_len"].default, _int(), _help(Workload, "output_len")),
    Param("batch", _W["batch_size"].default, _int(1, 65536), _help(Workload, "batch_size")),
)
BY_KEY: dict[str, Param] = {p.key: p for p in PARAMS}


def init_defaults() -> None:
    """Give every input its default in session state (before its widget is drawn)."""
    for param in PARAMS:
        st.session_state.setdefault(param.key, param.default)


def seed_from_url() -> None:
    """First run of a session: copy valid query parameters into session state, drop bad ones."""
    if st.session_state.get(SEEDED_KEY):
        return
    st.session_state[SEEDED_KEY] = True
    warnings = []
    for param in PARAMS:
        if param.key not in st.query_params:
            continue
        text = st.query_params[param.key]
        try:
            st.session_state[param.key] = param.parse(text)
        except ValueError as err:
            # no backticks around the value: inside a code span a backslash does not escape, so `x` could end it
            shown = plain(f"{param.key}={text}", max_chars=200)
            warnings.append(f"Ignored {shown} from the link: {plain(str(err).rstrip('.'))}.")
            del st.query_params[param.key]
    st.session_state[URL_WARNINGS_KEY] = warnings


def url_warnings() -> list[str]:
    """Messages about link parameters that were ignored on this session's first run."""
    return list(st.session_state.get(URL_WARNINGS_KEY, []))


def sync_url() -> None:
    """Put every input that differs from its default in the URL; remove the rest of ours."""
    for param in PARAMS:
        value = st.session_state.get(param.key, param.default)
        present = param.key in st.query_params
        if value == param.default:
            if present:
                del st.query_params[param.key]
            continue
        text = param.dump(value)
        if not present or st.query_params[param.key] != text:
            st.query_params[param.key] = text
