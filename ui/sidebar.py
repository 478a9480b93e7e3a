"""The sidebar: every shared scenario input, each under its ``ui.params`` key, help from the core.

Widget help texts are the ``Field`` descriptions of ``planner.scenario.Scenario`` and
``RequestShape`` (via ``ui.params.PARAMS``), so the app, the CLI and the code say the same thing.
"""

from __future__ import annotations

import streamlit as st
from pydantic import ValidationError

from planner.engine import DEFAULT_ENGINE, engine_name
from planner.errors import PlannerError
from planner.estimate.memory import plan_memory
from planner.estimate.resolve import resolve
from planner.hardware import HardwareProfile, get_profile, load_profiles
from planner.model.spec import ModelSpec
from planner.scenario import DEFAULT_GPU_MEMORY_UTILIZATION, MAX_IMAGES_PER_REQUEST
from ui import params
from ui.errors import plain
from ui.format import fmt_gib, kind_legend
from ui.params import BY_KEY
from ui.state import TOKEN_KEY, UPLOAD_KEY, load_model, model_choice, scenario_from, sidebar_values


def _help(key: str) -> str:
    return BY_KEY[key].help


def gpu_label(profile: HardwareProfile) -> str:
    """The picker's short label: the profile id (what ``--gpu`` takes) and the card's memory; it fits the sidebar."""
    return f"{profile.id} · {fmt_gib(profile.memory_bytes)}"


def gpu_caption(profile: HardwareProfile) -> str:
    """The card's full name and its HBM bandwidth, under the picker (a long name wraps there)."""
    parts = [plain(profile.name)]
    if profile.hbm_bandwidth_bytes_per_s:
        parts.append(f"{profile.hbm_bandwidth_bytes_per_s / 1e12:,.2f} TB/s")
    return " · ".join(parts)


def max_model_len_note(model: ModelSpec, length: int | None) -> str:
    """What the max_model_len field means for this model: empty is the model's maximum, vLLM's default."""
    most = f"{model.max_position_embeddings:,}"
    if length is None:
        return (
            f"Empty: the model's maximum, **{most} tokens**, as vLLM and `python -m planner` default. "
            "Type a length to plan for shorter requests."
        )
    return f"The model allows up to {most} tokens (vLLM's default): clear the field to plan with that."


def memory_fraction_note(model: ModelSpec, values: dict) -> str | None:
    """Under the memory slider: the fraction the engine defaults to (SGLang's static pool on this card and TP size,
    TensorRT-LLM's share of the free memory, vLLM's before 0.33.0), which the slider's vLLM default stands for; None
    where the default is the slider's, or while the inputs do not resolve (the page says why)."""
    try:
        sc = scenario_from(values)
        res = resolve(model, get_profile(sc.gpu), sc)
    except (PlannerError, ValidationError, ValueError):
        return None
    if res.memory_rule == "budget":  # vLLM: a note only where its version's default is not the slider's
        if sc.gpu_memory_utilization is not None or res.gpu_memory_utilization == DEFAULT_GPU_MEMORY_UTILIZATION:
            return None
        return (
            f"{sc.engine_version}: vLLM's default at this version is **`--gpu-memory-utilization "
            f"{res.gpu_memory_utilization:g}`** ({DEFAULT_GPU_MEMORY_UTILIZATION} from 0.33.0). The slider at "
            f"{DEFAULT_GPU_MEMORY_UTILIZATION} stands for that default; any other value sets it."
        )
    flag = f"{res.fraction_flag} {res.gpu_memory_utilization:g}"
    what = {
        "static_pool": "its static pool (weights + KV cache) is",
        "free_fraction": "its KV cache takes, of the memory free after weights, activations and CUDA graphs,",
    }[res.memory_rule]
    if sc.gpu_memory_utilization is not None:
        return f"{sc.engine_version}: {what} `{flag}`."
    default = "on this card and TP size" if res.static_pool else "(its default)"
    return (
        f"{sc.engine_version}: {what} **`{flag}`** {default}. The slider at {DEFAULT_GPU_MEMORY_UTILIZATION} stands "
        "for that default; any other value sets it."
    )


def batch_limits_note(model: ModelSpec, values: dict) -> str | None:
    """Under the step limits: what "auto" stands for, the engine's own defaults on this card (SGLang's request slots
    sized from its KV pool: the plan's) and chunked prefill at its version; None when all three are set, or while the
    inputs do not plan (the page says why)."""
    try:
        sc = scenario_from(values)
        res = plan_memory(model, get_profile(sc.gpu), sc, suggest=False).resolved
    except (PlannerError, ValidationError, ValueError):
        return None
    limits_set = sc.max_num_seqs is not None and sc.max_num_batched_tokens is not None
    if limits_set and sc.enable_chunked_prefill is not None:
        return None
    name = engine_name(sc.engine_version)
    chunked = f"chunked prefill **{'on' if res.enable_chunked_prefill else 'off'}**"
    if limits_set:
        return f"auto: {name} runs {chunked} here."
    slots = " (the request slots it sizes from its KV pool)" if res.static_pool and sc.max_num_seqs is None else ""
    with_chunked = f", {chunked}" if sc.enable_chunked_prefill is None else ""
    return (
        f"auto: {name} runs up to **{res.max_num_seqs:,}** sequences{slots} and **{res.max_num_batched_tokens:,}** "
        f"tokens in one step here{with_chunked}."
    )


def _model_section() -> ModelSpec | None:
    """The model pickers; returns the chosen model's spec (None when it cannot be loaded: the page says why)."""
    st.subheader("Model")
    st.selectbox("Catalog model", params.catalog_ids(), key="model", help=_help("model"))
    st.text_input("Or any Hub repo id", key="repo", placeholder="org/name, e.g. Qwen/Qwen2.5-7B", help=_help("repo"))
    with st.expander("Upload a config.json, or add a Hub token"):
        st.file_uploader(
            "config.json",
            type=["json"],
            key=UPLOAD_KEY,
            help="A model's config.json; it replaces the catalog pick and the repo id. "
            "An upload is not part of the link.",
        )
        st.text_input(
            "Hugging Face token",
            type="password",
            key=TOKEN_KEY,
            placeholder="hf_...",
            help="Only for gated or private repos. Kept in this browser session; never shown or put in the link.",
        )
    values = sidebar_values()
    kind, name = model_choice(values)
    try:
        loaded = load_model(values)
    except Exception:  # noqa: BLE001 (the page shows the error with what to do)
        st.caption(f":red[{kind}: {plain(name)} could not be loaded; see the page.]")
        return None
    source = loaded.source
    st.caption(f"{plain(source.name)} · {source.parameters} params · from {source.origin}")
    return loaded.spec


def _hardware_section() -> None:
    st.subheader("Hardware")
    profiles = load_profiles()  # one look at the profile folders per rerun, not one per option label
    gpu = st.selectbox(
        "GPU", sorted(profiles), key="gpu", format_func=lambda pid: gpu_label(profiles[pid]), help=_help("gpu")
    )
    st.caption(gpu_caption(profiles[gpu]))
    left, right = st.columns(2)
    left.number_input("Tensor parallel", min_value=1, step=1, key="tp", help=_help("tp"))
    right.number_input(
        "GPUs in total", min_value=1, step=1, value=None, key="gpus", placeholder="one replica", help=_help("gpus")
    )


PARALLELISM_BOX = "sidebar_parallelism"
"""Session-state key of the Parallelism expander's open state (not an input: it is not in the link)."""
ALL2ALL_LABELS = {
    "allgather_reducescatter": "all-gather (vLLM default)",
    "deepep_low_latency": "DeepEP low latency",
    "deepep_high_throughput": "DeepEP high throughput",
}
"""How the all-to-all picker reads (the values are vLLM's --all2all-backend names)."""


def parallel_summary(values: dict) -> str:
    """One line under the Parallelism expander naming what differs from one stage on the fewest nodes ('' if
    nothing does), so a PP or EP set from a link is seen with the expander closed."""
    parts = []
    if values.get("pp", 1) > 1:
        parts.append(f"PP {values['pp']}")
    if values.get("nodes"):
        parts.append(f"{values['nodes']} node(s)")
    if values.get("ep"):
        ep = values.get("tp", 1) * values.get("dp", 1)
        parts.append(f"expert parallel {ep} (TP {values.get('tp', 1)} x DP {values.get('dp', 1)})")
    elif values.get("dp", 1) > 1:
        parts.append(f"DP {values['dp']}")
    return " · ".join(parts)


def dense_note(model: ModelSpec | None) -> str:
    """Why the expert-parallel switch is off for this model ('' for a MoE model, or when none is loaded)."""
    if model is None or model.is_moe:
        return ""
    return f"{plain(model.name)} is dense (no routed experts): expert parallelism splits a MoE model's experts."


def _ep_off_drops_dp() -> None:
    """Turning expert parallelism off takes data parallelism with it (the core models DP with EP only), so the
    data-parallel input, disabled then, is never left holding a size the page would refuse."""
    if not st.session_state.get("ep"):
        st.session_state["dp"] = 1


def _parallelism_section(model: ModelSpec | None) -> None:
    """Pipeline stages, nodes, expert and attention data parallelism (vLLM --pipeline-parallel-size,
    --enable-expert-parallel, --data-parallel-size), collapsed by default; the core checks the layout.

    Whether an input is disabled never depends on its own value: Streamlit discards a change that arrives at a
    widget drawn disabled in that run, so an input that disabled itself on reaching its default could not get
    there. A dense model (from a link, or picked after a MoE one) turns EP and DP off, and says so."""
    note = dense_note(model)
    if note and (st.session_state.get("ep") or st.session_state.get("dp") != 1):
        st.session_state.update(ep=False, dp=1)
        st.warning(f"Expert and data parallelism turned off: {note}", icon=":material/info:")
    with st.expander("Parallelism", key=PARALLELISM_BOX, on_change="rerun") as box:
        if box.open:  # closed, it draws nothing; its inputs keep their values (persist_state)
            _parallelism_inputs(note)
    summary = parallel_summary(sidebar_values())
    if summary:
        st.caption(summary)


def _parallelism_inputs(note: str) -> None:
    """The Parallelism expander's inputs; each keeps its value for the session while the expander is closed."""
    keep = "session"
    left, right = st.columns(2)
    left.number_input("PP stages", min_value=1, step=1, key="pp", help="--pp: " + _help("pp"), persist_state=keep)
    right.number_input(
        "Nodes",
        min_value=1,
        step=1,
        value=None,
        key="nodes",
        placeholder="fewest",
        help="--num-nodes: " + _help("nodes"),
        persist_state=keep,
    )
    st.toggle(
        "NCCL all-reduce only",
        key="nccl",
        help="--disable-custom-all-reduce: " + _help("nccl"),
        persist_state=keep,
    )
    ep = st.toggle(
        "Expert parallel",
        key="ep",
        disabled=bool(note),
        on_change=_ep_off_drops_dp,
        help="--enable-expert-parallel: " + _help("ep"),
        persist_state=keep,
    )
    if note:
        st.caption(note)
    left, right = st.columns(2)
    dp = left.number_input(
        "Data parallel",
        min_value=1,
        step=1,
        key="dp",
        disabled=not ep,
        help="--data-parallel-size: " + _help("dp"),
        persist_state=keep,
    )
    right.number_input(
        "Imbalance",
        min_value=1.0,
        max_value=8.0,
        step=0.1,
        format="%.2f",
        key="imbalance",
        disabled=not ep,
        help="--expert-load-imbalance: " + _help("imbalance"),
        persist_state=keep,
    )
    st.selectbox(
        "All-to-all (with DP)",
        params.ALL2ALL_BACKENDS,
        key="a2a",
        format_func=lambda backend: ALL2ALL_LABELS.get(backend, backend),
        disabled=not (ep and dp > 1),
        help="--all2all-backend: " + _help("a2a"),
        persist_state=keep,
    )


def _precision_section() -> None:
    st.subheader("Precision")
    left, right = st.columns(2)
    left.selectbox("Weights", params.WEIGHT_DTYPES, key="weights", help=_help("weights"))
    right.selectbox("KV cache", params.KV_DTYPES, key="kv", help=_help("kv"))
    mixed = st.toggle("Mixed precision", key="mixed", help=_help("mixed"))
    left, right = st.columns(2)
    left.selectbox("Attention, lm_head", params.HIGH_PRECISION_DTYPES, key="hi", disabled=not mixed, help=_help("hi"))
    right.selectbox("MLP, experts", params.LOW_PRECISION_DTYPES, key="lo", disabled=not mixed, help=_help("lo"))


def _memory_section(model: ModelSpec | None) -> None:
    st.subheader("Context and memory")
    st.number_input(
        "max_model_len (tokens)",
        min_value=1,
        step=1024,
        value=None,
        key="len",
        placeholder="the model's maximum",
        help=_help("len"),
    )
    if model is not None:
        st.caption(max_model_len_note(model, sidebar_values().get("len")))
    st.slider("gpu_memory_utilization", min_value=0.5, max_value=1.0, step=0.01, key="util", help=_help("util"))
    if model is not None:
        note = memory_fraction_note(model, sidebar_values())
        if note:
            st.caption(note)
    with st.expander("Engine, version and limits"):
        st.text_input("Engine and version", key="ev", placeholder=DEFAULT_ENGINE, help=_help("ev"))
        st.selectbox(
            "block_size",
            params.BLOCK_SIZES,
            key="block",
            format_func=str,
            help=_help("block"),
        )
        st.number_input(
            "max_num_seqs", min_value=1, step=1, value=None, key="seqs", placeholder="auto", help=_help("seqs")
        )
        st.number_input(
            "max_num_batched_tokens",
            min_value=1,
            step=256,
            value=None,
            key="tokens",
            placeholder="auto",
            help=_help("tokens"),
        )
        if model is not None:
            limits = batch_limits_note(model, sidebar_values())
            if limits:
                st.caption(limits)
        st.radio(
            "Engine",
            params.ENGINES,
            key="engine",
            horizontal=True,
            format_func=lambda e: {"cuda-graphs": "CUDA graphs", "eager": "eager"}[e],
            help=_help("engine"),
        )
        st.selectbox(
            "Chunked prefill",
            params.CHUNKED_CHOICES,
            key="chunked",
            format_func=lambda c: {"auto": "auto (the engine's default)", True: "on", False: "off"}[c],
            help=_help("chunked"),
        )


def _workload_section() -> None:
    st.subheader("Workload")
    left, right = st.columns(2)
    left.number_input("Input tokens", min_value=1, step=128, key="in", help=_help("in"))
    right.number_input("Output tokens", min_value=1, step=64, key="out", help=_help("out"))
    st.number_input("Batch / concurrency", min_value=1, step=1, key="batch", help=_help("batch"))
    left, right = st.columns(2)
    left.number_input(
        "Images per request", min_value=0, max_value=MAX_IMAGES_PER_REQUEST, step=1, key="images", help=_help("images")
    )
    right.text_input(
        "Image size (WxH)",
        key="image",
        placeholder="native",
        disabled=not st.session_state.get("images"),
        help=_help("image") + " Empty: the encoder's native size. Vision-language models only (the Plan page names "
        "the encoder).",
    )


SPECULATIVE_LABELS = {
    "off": "off",
    "ngram": "n-gram (prompt lookup)",
    "draft": "draft model",
    "eagle": "EAGLE head",
    "eagle3": "EAGLE-3 head",
    "mtp": "MTP layer",
}
"""How the speculative-method picker reads (the values are the core's and vLLM's method names)."""


def _keep_draft_for_method() -> None:
    """On a method change: a method that names no drafter (ngram, mtp) drops the draft model the last one had."""
    if st.session_state.get("spec") not in params.DRAFTED_METHODS:
        st.session_state["draft"] = ""


def serving_summary(values: dict) -> str:
    """One line under the expander saying which serving features are on ('' when none is)."""
    parts = []
    if values.get("spec", "off") != "off":
        parts.append(
            f"speculative decoding: {SPECULATIVE_LABELS[values['spec']]}, k = {values['spec_k']}, "
            f"a = {values['spec_a']:g}"
        )
    if values.get("lora"):
        parts.append(f"LoRA: {values['loras']:,} adapter slot(s) of rank {values['lora_rank']}")
    return " · ".join(parts)


def _serving_section() -> None:
    """Speculative decoding and LoRA adapters (vLLM --speculative-config, --enable-lora), collapsed by default."""
    from planner.estimate.speculative import DRAFT_COST  # what each method's draft costs, said by the core

    with st.expander("Serving features"):
        method = st.selectbox(
            "Speculative decoding",
            params.SPECULATIVE_METHODS,
            key="spec",
            format_func=SPECULATIVE_LABELS.__getitem__,
            on_change=_keep_draft_for_method,
            help="vLLM --speculative-config (--speculative-method): " + _help("spec"),
        )
        if method != "off":
            st.caption(f"Draft cost: {plain(DRAFT_COST[method])}.")
            left, right = st.columns(2)
            left.number_input(
                "Draft tokens",
                min_value=1,
                max_value=params.MAX_SPECULATIVE_TOKENS,
                step=1,
                key="spec_k",
                help="--num-speculative-tokens: " + _help("spec_k"),
            )
            right.number_input(
                "Acceptance a",
                min_value=0.0,
                max_value=0.99,
                step=0.05,
                format="%.2f",
                key="spec_a",
                help="--acceptance-rate: " + _help("spec_a"),
            )
            if method in params.DRAFTED_METHODS or sidebar_values().get("draft"):
                st.text_input(
                    "Draft model" if method == "draft" else "Draft head (for the export)",
                    key="draft",
                    placeholder="org/name, e.g. meta-llama/Llama-3.2-1B"
                    if method == "draft"
                    else "org/name, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                    help="--draft-model: " + _help("draft"),
                )
        st.divider()
        lora = st.toggle("LoRA adapters", key="lora", help="--enable-lora: " + _help("lora"))
        if lora:
            left, right = st.columns(2)
            left.number_input(
                "Adapter slots",
                min_value=1,
                max_value=params.MAX_LORAS,
                step=1,
                key="loras",
                help="--max-loras: " + _help("loras"),
            )
            right.selectbox(
                "Max rank", params.LORA_RANKS, key="lora_rank", help="--max-lora-rank: " + _help("lora_rank")
            )
    summary = serving_summary(sidebar_values())
    if summary:
        st.caption(summary)


def render() -> None:
    """Draw the shared inputs (seeded from the URL on a session's first run) and write them back to it."""
    params.init_defaults()
    params.seed_from_url()
    with st.sidebar:
        for warning in params.url_warnings():
            st.warning(warning, icon=":material/link_off:")
        model = _model_section()
        _hardware_section()
        _parallelism_section(model)
        _precision_section()
        _memory_section(model)
        _workload_section()
        _serving_section()
        st.divider()
        st.caption("The address bar holds every input above: copy it to share this plan.")
        kind_legend()
    params.sync_url()
