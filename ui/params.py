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

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, get_args
from urllib.parse import quote, unquote

import streamlit as st
from pydantic import BaseModel

from planner.engine import EngineError, resolve_engine
from planner.errors import PlannerError
from planner.estimate.resolve import KV_DTYPES
from planner.hardware import load_profiles
from planner.model.quantization import NAMED_FORMATS
from planner.model.sources import catalog_entries, check_remote_name
from planner.scenario import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    LORA_RANKS,
    MAX_IMAGES_PER_REQUEST,
    MAX_LORAS,
    MAX_PARALLEL,
    MAX_SPECULATIVE_TOKENS,
    LoRA,
    RequestShape,
    Scenario,
    SpeculativeDecoding,
    parse_image_size,
)
from ui.errors import plain

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B"
WEIGHT_DTYPES: tuple[str, ...] = ("auto", *NAMED_FORMATS)
HIGH_PRECISION_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "int8")
LOW_PRECISION_DTYPES: tuple[str, ...] = ("fp8", "int8", "int4", "awq", "gptq", "mxfp4", "nvfp4", "nf4")
BLOCK_SIZES: tuple[int | str, ...] = ("auto", 8, 16, 32, 64, 128)  # "auto": the engine picks (16, MLA 64)
CHUNKED_CHOICES: tuple[bool | str, ...] = ("auto", True, False)  # "auto": the engine's default at its version
ENGINES: tuple[str, ...] = ("cuda-graphs", "eager")
ALL2ALL_BACKENDS: tuple[str, ...] = get_args(Scenario.model_fields["all2all_backend"].annotation)
"""vLLM --all2all-backend's choices the core prices (the expert dispatch/combine under data parallelism)."""
SEEDED_KEY = "_ui_url_seeded"
URL_WARNINGS_KEY = "_ui_url_warnings"


@dataclass(frozen=True)
class Param:
    """One shared input: session-state key (= query parameter), default, how it reads from a URL, and the
    Scenario field it sets."""

    key: str
    default: Any
    parse: Callable[[str], Any]
    help: str = ""
    field: str | None = None
    """The ``Scenario`` field this input is (``workload.<name>`` for a ``RequestShape`` field); None: no single
    field (the model picks, and the mixed-precision inputs, which make ``precision_overrides`` together)."""
    shown: Callable[[Any], Any] | None = None
    """How the field's value shows in the input (``sidebar_updates``), when the widget holds something else than
    the field: the image size's text input holds 'WxH' for the field's (W, H). None: the value itself."""
    unset: Any = None
    """The input's value that stands for the field's None (the engine's own default, which the input shows as a
    number): the Scenario gets None while the input holds it. None: every value is the field's."""

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


def _engine_spec(text: str) -> str:
    """An engine and version from a link, as ``--engine-version`` takes it ('sglang@0.5.5', 'vllm@0.15.1', a profile
    id): refused with the known engines and ranges when no profile holds it."""
    spec = text.strip()
    try:
        resolve_engine(spec)
    except EngineError as err:
        raise ValueError(str(err)) from None
    return spec


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
        raise ValueError(str(err)) from None


def _image_size(text: str) -> str:
    """An image size from a link or the text input: 'WxH' in pixels (as the core reads it), or '' for the
    encoder's native size."""
    text = text.strip()
    if not text:
        return text
    try:
        return _size_text(parse_image_size(text))
    except PlannerError as err:
        raise ValueError(str(err)) from None


def _size_text(size: tuple[int, int] | None) -> str:
    """An image size as its text input shows it: 'WxH', or '' for none (the encoder's native size)."""
    return "" if size is None else f"{size[0]}x{size[1]}"


def _chunked(text: str) -> bool | str:
    """Chunked prefill from a link: '1' / '0' (or on / off), 'auto' for the engine's default."""
    return "auto" if text.lower() in ("", "auto") else _bool(text)


def _block(text: str) -> int | str:
    return _one_of(lambda: BLOCK_SIZES, lambda t: "auto" if t in ("", "auto") else int(t))(text)


WORKLOAD_PREFIX = "workload."
_FIELD_DEFAULT = object()


@dataclass(frozen=True)
class Feature:
    """A Scenario field that is a nested model and off (None) by default: speculative decoding, LoRA.

    Its inputs are ``PARAMS`` rows whose field is ``<field>.<name>``; ``switch`` is the input that turns it
    off when it holds ``off`` (the speculative method's "off", LoRA's unticked box) and reads ``on`` when it is on
    (None: the switch is one of the model's own fields, the method)."""

    field: str
    model: type[Any]
    switch: str
    off: Any
    on: Any = None

    @property
    def prefix(self) -> str:
        return self.field + "."


FEATURES: tuple[Feature, ...] = (
    Feature("speculative", SpeculativeDecoding, "spec", "off"),
    Feature("lora", LoRA, "lora", False, on=True),
)
"""The serving features of the sidebar's "Serving features" expander (vLLM --speculative-config, --enable-lora)."""
NESTED: dict[str, type[Any]] = {WORKLOAD_PREFIX: RequestShape, **{f.prefix: f.model for f in FEATURES}}
"""Field prefix -> the nested model whose field a ``<prefix><name>`` input is."""
SPECULATIVE_METHODS: tuple[str, ...] = ("off", *get_args(SpeculativeDecoding.model_fields["method"].annotation))
"""The speculative-method picker: off (no speculation, vLLM's default), then the core's methods."""


def _names_a_drafter(method: str) -> bool:
    """Whether ``method`` takes a draft model or head (the core's own check: ngram and mtp refuse one)."""
    try:
        SpeculativeDecoding.model_validate(
            {"method": method, "num_speculative_tokens": 1, "acceptance_rate": 0.0, "draft_model": "drafter"}
        )
    except PlannerError:
        return False
    return True


DRAFTED_METHODS: tuple[str, ...] = tuple(m for m in SPECULATIVE_METHODS[1:] if _names_a_drafter(m))
"""The methods whose drafter is named: draft (its config is loaded), eagle and eagle3 (the head vLLM loads)."""
DEFAULT_SPECULATIVE_TOKENS = 3
DEFAULT_ACCEPTANCE_RATE = 0.7
"""k and a when speculation is turned on (the core has no default: the CLI's example, --num-speculative-tokens 3
--acceptance-rate 0.7, which is EAGLE's a on Llama-3.1-8B, k = 3, in planner.estimate.speculative)."""


def _field(
    key: str,
    field: str,
    parse: Callable[[str], Any],
    default: Any = _FIELD_DEFAULT,
    shown: Callable[[Any], Any] | None = None,
    unset: Any = None,
) -> Param:
    """An input that is one Scenario field, or one field of a nested model (``workload.<name>``: RequestShape;
    ``speculative.<name>``, ``lora.<name>``: a :data:`FEATURES` model); default and help from the field."""
    prefix = next((p for p in NESTED if field.startswith(p)), "")
    spec, name = (NESTED[prefix], field.removeprefix(prefix)) if prefix else (Scenario, field)
    info = spec.model_fields[name]
    value = info.default if default is _FIELD_DEFAULT else default
    if unset is not None and value is None:
        value = unset  # the input shows the engine's default
    return Param(key, value, parse, info.description or "", field, shown, unset)


def _imbalance(text: str) -> float:
    """The expert load imbalance from a link: 1 <= factor <= 8 (the field's range), to two decimals as the input
    steps it."""
    value = round(float(text), 2)
    if not 1.0 <= value <= 8.0:  # also refuses nan
        raise ValueError("must be between 1 and 8")
    return value


def _rate(text: str) -> float:
    """An acceptance rate from a link: 0 <= a <= 0.99 (the input's range; the core takes a < 1)."""
    value = float(text)
    if not 0.0 <= value <= 0.99:  # also refuses nan
        raise ValueError("must be between 0 and 0.99")
    return value


def _drafter(text: str) -> str:
    """The draft model or EAGLE head: a catalog name or Hub repo id, as the repo input takes ('' for none)."""
    return _remote_name(text)


PARAMS: tuple[Param, ...] = (
    Param("model", DEFAULT_MODEL, _one_of(catalog_ids), "A model from the bundled catalog (type to search)."),
    Param(
        "repo",
        "",
        _remote_name,
        "Any Hugging Face Hub repo id, e.g. 'Qwen/Qwen2.5-7B' (or 'org/name/subfolder'); overrides the catalog pick.",
    ),
    _field("gpu", "gpu", _one_of(gpu_ids)),
    _field("gpus", "num_gpus", _optional_int()),
    _field("tp", "tp", _int(1, 1024)),
    _field("pp", "pp", _int(1, MAX_PARALLEL)),
    _field("nodes", "num_nodes", _optional_int()),
    _field("ep", "enable_expert_parallel", _bool),
    _field("dp", "data_parallel_size", _int(1, MAX_PARALLEL)),
    _field("a2a", "all2all_backend", _one_of(lambda: ALL2ALL_BACKENDS)),
    _field("imbalance", "expert_load_imbalance", _imbalance),
    _field("nccl", "disable_custom_all_reduce", _bool),
    _field("weights", "weight_dtype", _one_of(lambda: WEIGHT_DTYPES)),
    Param(
        "mixed",
        False,
        _bool,
        "Mixed precision: attention and lm_head at a high precision, MLP and experts at a low one.",
    ),
    Param(
        "hi", "bf16", _one_of(lambda: HIGH_PRECISION_DTYPES), "Precision of attention and lm_head in mixed precision."
    ),
    Param(
        "lo", "int4", _one_of(lambda: LOW_PRECISION_DTYPES), "Precision of the MLP and the experts in mixed precision."
    ),
    _field("kv", "kv_cache_dtype", _one_of(lambda: KV_DTYPES)),
    _field("len", "max_model_len", _optional_int()),  # None: the model's maximum, as vLLM and the CLI default
    _field("util", "gpu_memory_utilization", _fraction, unset=DEFAULT_GPU_MEMORY_UTILIZATION),  # vLLM's default
    _field("block", "block_size", _block, unset="auto"),  # a selectbox shows None as "Choose an option"
    _field("seqs", "max_num_seqs", _optional_int()),
    _field("tokens", "max_num_batched_tokens", _optional_int()),
    _field("engine", "engine", _one_of(lambda: ENGINES)),
    _field("ev", "engine_version", _engine_spec),
    _field("chunked", "enable_chunked_prefill", _chunked, unset="auto"),  # None: the engine's default
    _field("in", "workload.input_len", _int()),
    _field("out", "workload.output_len", _int()),
    _field("batch", "workload.batch_size", _int(1, 65536)),
    _field("images", "workload.images_per_request", _int(0, MAX_IMAGES_PER_REQUEST)),
    _field("image", "workload.image_size", _image_size, default="", shown=_size_text),
    _field("spec", "speculative.method", _one_of(lambda: SPECULATIVE_METHODS), default="off"),
    _field(
        "spec_k",
        "speculative.num_speculative_tokens",
        _int(1, MAX_SPECULATIVE_TOKENS),
        default=DEFAULT_SPECULATIVE_TOKENS,
    ),
    _field("spec_a", "speculative.acceptance_rate", _rate, default=DEFAULT_ACCEPTANCE_RATE),
    _field("draft", "speculative.draft_model", _drafter, default=""),
    Param(
        "lora", False, _bool, "Serve LoRA adapters (vLLM --enable-lora): their slots take GPU memory from the KV cache."
    ),
    _field("loras", "lora.max_loras", _int(1, MAX_LORAS)),
    _field("lora_rank", "lora.max_lora_rank", _one_of(lambda: LORA_RANKS, int)),
)
BY_KEY: dict[str, Param] = {p.key: p for p in PARAMS}
KEY_OF_FIELD: dict[str, str] = {p.field: p.key for p in PARAMS if p.field is not None}
"""Scenario field (``workload.<name>`` for the workload's) -> the sidebar key that holds it."""
FIELD_OF_KEY: dict[str, str] = {key: field for field, key in KEY_OF_FIELD.items()}
"""Sidebar key -> the Scenario field it sets (only the inputs that are one field)."""
MIXED_COMPONENTS = {"attention": "hi", "lm_head": "hi", "mlp": "lo", "experts": "lo"}
"""Mixed precision: which of the two precision inputs each ``precision_overrides`` component takes."""


# ------------------------------------------------------------------------------ sidebar keys <-> Scenario fields


def precision_overrides(values: dict[str, Any]) -> dict[str, str]:
    """Mixed precision as the core's per-component overrides (attention and lm_head high, MLP and experts low)."""
    if not values.get("mixed"):
        return {}
    return {component: values[key] for component, key in MIXED_COMPONENTS.items()}


def precision_values(overrides: dict[str, str]) -> dict[str, Any]:
    """The inverse of :func:`precision_overrides`: the mixed-precision inputs for ``overrides``; {} when the
    sidebar cannot show them (a split other than attention + lm_head / MLP + experts)."""
    if not overrides:
        return {"mixed": False}
    values = {key: overrides.get(component) for component, key in MIXED_COMPONENTS.items()}
    if set(overrides) != set(MIXED_COMPONENTS) or precision_overrides({"mixed": True, **values}) != overrides:
        return {}
    return {"mixed": True, **values}


def _prefix(field: str) -> str:
    """The nested model's prefix of a ``<prefix><name>`` field ('' for a field of Scenario itself)."""
    return next((prefix for prefix in NESTED if field.startswith(prefix)), "")


def scenario_fields(values: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``Scenario`` (the workload's nested) from sidebar values, through ``Param.field``.

    A serving feature (:data:`FEATURES`) is None while its switch is off, else its fields as a dict, so that
    Scenario validates them where they are (a bad one is named ``speculative.acceptance_rate``); an empty
    text input (the draft model) is the field's None."""
    fields: dict[str, Any] = {"precision_overrides": precision_overrides(values)}
    nested: dict[str, dict[str, Any]] = {prefix: {} for prefix in NESTED}
    for param in PARAMS:
        if param.field is None:
            continue
        value = values.get(param.key, param.default)
        if param.unset is not None and value == param.unset:
            value = None  # the engine's default
        prefix = _prefix(param.field)
        if prefix:
            nested[prefix][param.field.removeprefix(prefix)] = None if value == "" else value
        else:
            fields[param.field] = value
    for feature in FEATURES:
        off = values.get(feature.switch, BY_KEY[feature.switch].default) == feature.off
        fields[feature.field] = None if off else nested[feature.prefix]
    workload = nested[WORKLOAD_PREFIX]
    if not workload.get("images_per_request"):
        workload["image_size"] = None  # the size says nothing while the requests carry no image
    return {**fields, "workload": RequestShape(**workload)}


def feature_values(feature: Feature, value: Any) -> dict[str, Any]:
    """The sidebar inputs of one serving feature's value (None: off); {} when the sidebar cannot show it (a field
    set that has no input, e.g. --max-cpu-loras)."""
    if value is None:
        return {feature.switch: feature.off}
    items = value.model_dump() if isinstance(value, BaseModel) else dict(value)
    updates: dict[str, Any] = {} if feature.on is None else {feature.switch: feature.on}
    for name, item in items.items():
        key = KEY_OF_FIELD.get(feature.prefix + name)
        if key is None:
            if item != feature.model.model_fields[name].default:
                return {}
            continue
        updates[key] = "" if item is None else item
    return updates


FEATURE_OF_FIELD: dict[str, Feature] = {f.field: f for f in FEATURES}


def sidebar_updates(changes: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`scenario_fields`: sidebar values for Scenario field changes (``tp``, ``kv_cache_dtype``,
    ``precision_overrides``, ``workload`` as a dict or RequestShape). Fields without a sidebar input are left out."""
    updates: dict[str, Any] = {}
    for field, value in changes.items():
        if field == "precision_overrides":
            updates.update(precision_values(value))
        elif field == "workload":
            items = value.model_dump() if isinstance(value, RequestShape) else value
            updates.update(sidebar_updates({WORKLOAD_PREFIX + name: v for name, v in items.items()}))
        elif field in FEATURE_OF_FIELD:
            updates.update(feature_values(FEATURE_OF_FIELD[field], value))
        elif field in KEY_OF_FIELD:
            param = BY_KEY[KEY_OF_FIELD[field]]
            if value is None and param.unset is not None:
                value = param.unset
            updates[param.key] = value if param.shown is None else param.shown(value)
    return updates


def apply_to_sidebar(changes: dict[str, Any]) -> None:
    """Write Scenario field changes into the sidebar's inputs (as an ``on_click`` callback: before they are drawn)."""
    st.session_state.update(sidebar_updates(changes))


def session_values() -> dict[str, Any]:
    """Every shared input's current value (its default when not drawn yet)."""
    return {p.key: st.session_state.get(p.key, p.default) for p in PARAMS}


def link_query(values: dict[str, Any]) -> dict[str, str]:
    """The query parameters of a link that reopens ``values``: every input that differs from its default."""
    return {
        key: BY_KEY[key].dump(value) for key, value in values.items() if key in BY_KEY and value != BY_KEY[key].default
    }


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


# ------------------------------------------------------------------------------ a page's own inputs in the URL


@dataclass(frozen=True)
class PageParam:
    """One page-local input bound to the URL: its widget key, its query parameter, default and parser."""

    key: str
    query: str
    default: Any
    parse: Callable[[str], Any]

    def dump(self, value: Any) -> str:
        if isinstance(value, bool):
            return "1" if value else "0"
        return f"{value:g}" if isinstance(value, float) else str(value)


def _positive(low: float, high: float = 1e9) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not (low <= value <= high):  # also refuses nan
            raise ValueError(f"must be between {low:g} and {high:g}")
        return value

    return parse


def page_inputs(rows: tuple[PageParam, ...]) -> None:
    """Before a page draws its widgets: each input's value from the URL (once per visit), else its default.

    Widgets bound this way take no ``value=``: their value is in session state. A bad value is dropped
    from the URL with a warning, as for the sidebar's.
    """
    for row in rows:
        if row.key in st.session_state:
            continue
        value = row.default
        if row.query in st.query_params:
            text = st.query_params[row.query]
            try:
                value = row.parse(text)
            except ValueError as err:
                st.warning(
                    f"Ignored {plain(f'{row.query}={text}', max_chars=200)} from the link: "
                    f"{plain(str(err).rstrip('.'))}.",
                    icon=":material/link_off:",
                )
                del st.query_params[row.query]
        st.session_state[row.key] = value


def sync_page_inputs(rows: tuple[PageParam, ...]) -> None:
    """After a page drew its widgets: the URL holds each input that differs from its default, and not the rest."""
    for row in rows:
        value = st.session_state.get(row.key, row.default)
        if value is None or value == row.default:  # None: a segmented control clicked off
            if row.query in st.query_params:
                del st.query_params[row.query]
        elif st.query_params.get(row.query) != row.dump(value):
            st.query_params[row.query] = row.dump(value)


def simulate_url_inputs(distributions: tuple[str, ...]) -> tuple[PageParam, ...]:
    """The Simulate page's traffic and SLO inputs as they travel in a link (``?rate=60&ttft=0.5&e2e_on=1``)."""

    def whole(low: int, high: int) -> Callable[[str], int]:
        return _int(low, high)

    def choice(options: tuple[str, ...]) -> Callable[[str], str]:
        return _one_of(lambda: options)

    return (
        PageParam("simulate_rate", "rate", 10.0, _positive(0.01, 1e6)),
        PageParam("simulate_requests", "requests", 1000, whole(50, 20_000)),
        PageParam("simulate_cap", "cap", 0, whole(0, 1_000_000)),
        PageParam("simulate_hit", "hit", 0.0, _positive(0.0, 0.95)),
        PageParam("simulate_seed", "seed", 0, whole(0, 2**31 - 1)),
        PageParam("simulate_dist", "dist", "fixed", choice(distributions)),
        PageParam("simulate_stat", "stat", "p99", choice(("p99", "p90"))),
        PageParam("simulate_ttft_on", "ttft_on", True, _bool),
        PageParam("simulate_ttft", "ttft", 1.0, _positive(0.001, 3600.0)),
        PageParam("simulate_tpot_on", "tpot_on", True, _bool),
        PageParam("simulate_tpot", "tpot", 0.05, _positive(0.001, 3600.0)),
        PageParam("simulate_e2e_on", "e2e_on", False, _bool),
        PageParam("simulate_e2e", "e2e", 20.0, _positive(0.001, 36000.0)),
    )


def disagg_url_inputs(layout: type[BaseModel]) -> tuple[PageParam, ...]:
    """The Simulate page's disaggregated prefill/decode inputs as they travel in a link (``?pd=1&pd_p=2&pd_d=1
    &pd_link=nvlink``): a switch, then the fields of ``layout`` (``planner.serve.disagg.DisaggLayout``, passed in so
    that this module imports no simulator), each with its default and upper bound."""
    fields = layout.model_fields

    def count(name: str) -> Callable[[str], int]:
        high = next(m.le for m in fields[name].metadata if getattr(m, "le", None) is not None)
        return _int(1, high)

    links = get_args(fields["kv_transfer_link"].annotation)
    return (
        PageParam("simulate_pd", "pd", False, _bool),
        PageParam("simulate_pd_p", "pd_p", fields["prefill_instances"].default, count("prefill_instances")),
        PageParam("simulate_pd_ptp", "pd_ptp", fields["prefill_tp"].default, count("prefill_tp")),
        PageParam("simulate_pd_d", "pd_d", fields["decode_instances"].default, count("decode_instances")),
        PageParam("simulate_pd_dtp", "pd_dtp", fields["decode_tp"].default, count("decode_tp")),
        PageParam("simulate_pd_link", "pd_link", fields["kv_transfer_link"].default, _one_of(lambda: links)),
    )


# ------------------------------------------------------------------------------ Compare's rows in the URL

ROWS_QUERY = "rows"
"""Compare's table in a link: ``?rows=<row>;<row>``, each row its cells in ``ui.state.COMPARE_COLUMNS`` order,
comma-separated, e.g. ``meta-llama/Llama-3.1-70B,h100-sxm,4,1,auto,auto,8192`` (``auto`` for an empty max_model_len)."""
NO_ROWS = "none"
"""``?rows=none``: the user deleted every row (distinct from no parameter: the starting rows)."""
MAX_LINK_ROWS = 12
UPLOAD_NAME = re.compile(r"^[\w][\w .()+-]{0,120}\.json$")
"""A Compare row's model that names a config.json uploaded on the page (a file name, never a path)."""
_CELL_SAFE = "/-_.~ ()+"


def row_model(text: str) -> str:
    """A Compare row's model: a catalog name, a Hub repo id, or the name of a config.json uploaded on the page.

    Never a path on the server: names with a folder go through ``check_remote_name``, which refuses paths.
    """
    text = str(text).strip()
    if not text:
        raise ValueError("the model is empty")
    return text if UPLOAD_NAME.match(text) else _remote_name(text)


def table_cell(value: Any) -> Any:
    """A table cell as a plain value: None for an empty one (None, '', NaN), an int for a whole float."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value.item() if hasattr(value, "item") else value  # numpy scalars from a DataFrame


def dump_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """The ``rows`` query value for Compare's table; rows with an empty cell (other than ``len``) are left out."""
    texts = []
    for row in rows:
        cells = {column: table_cell(row.get(column)) for column in columns}
        if any(value is None for column, value in cells.items() if column != "len"):
            continue
        shown = [str(value) if column == "model" else BY_KEY[column].dump(value) for column, value in cells.items()]
        texts.append(",".join(quote(text, safe=_CELL_SAFE) for text in shown))
    return ";".join(texts) if texts else NO_ROWS


def parse_rows(text: str, columns: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """``?rows=`` back into table rows, each cell checked as its sidebar input is (the model by :func:`row_model`).

    Returns (rows, warnings): a row that does not parse is left out with a warning that names it and why.
    """
    if text.strip() == NO_ROWS:
        return [], []
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    for number, part in enumerate(text.split(";"), start=1):
        if not part.strip():
            continue
        if len(rows) == MAX_LINK_ROWS:
            warnings.append(f"Ignored the link's rows after the first {MAX_LINK_ROWS}.")
            break
        try:
            rows.append(_parse_row(part, columns))
        except ValueError as err:
            warnings.append(
                f"Ignored row {number} ({plain(unquote(part), max_chars=200)}) from the link: "
                f"{plain(_clause(str(err)))}" + ("" if str(err).endswith("...") else ".")
            )
    return rows, warnings


def _parse_row(part: str, columns: Sequence[str]) -> dict[str, Any]:
    cells = [unquote(cell) for cell in part.split(",")]
    if len(cells) != len(columns):
        raise ValueError(f"a row has {len(columns)} cells ({', '.join(columns)}), this one {len(cells)}")
    row = {}
    for column, cell in zip(columns, cells):
        if column == "model":
            row[column] = row_model(cell)  # its message names the model
            continue
        try:
            row[column] = BY_KEY[column].parse(cell.strip())
        except ValueError as err:
            raise ValueError(f"{column} {cell!r} {_clause(str(err))}") from None
    return row


def _clause(text: str) -> str:
    """``text`` without its closing full stop (an ellipsis stays), to go inside a sentence."""
    return text if text.endswith("...") else text.removesuffix(".")
