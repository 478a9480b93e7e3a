"""Shared pieces of the commands: the MODEL argument, the scenario flags, loading, and rendering.

Flags are named as vLLM names them (``--tensor-parallel-size`` with the short ``--tp``,
``--kv-cache-dtype`` with ``--kv-dtype`` ...) and take their help text from the descriptions of
the core's pydantic fields, so ``--help`` and the app's tooltips say the same thing. Nothing here
computes a planner number: it turns flags into core objects and core objects into text.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel, ValidationError

from planner.efficiency import Efficiency
from planner.errors import ScenarioError
from planner.hardware import HardwareProfile, get_profile
from planner.model.families import build_spec
from planner.model.sources import LoadedConfig, load_config
from planner.model.spec import ModelSpec
from planner.scenario import LORA_RANKS, LoRA, RequestShape, Scenario, SpeculativeDecoding, parse_image_size
from planner.units import GiB, fmt_bytes, fmt_count, fmt_flop_count, fmt_gib, fmt_int, fmt_seconds

if TYPE_CHECKING:  # rich is imported by the table views only: --format json never pays for it
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from planner.serve.disagg import DisaggLayout

FORMATS = ("table", "json", "yaml")

#: Scenario/RequestShape field -> the flag that sets it, so a validation error names the flag.
FIELD_FLAGS: dict[str, str] = {
    "gpu": "--gpu",
    "num_gpus": "--num-gpus",
    "tp": "--tp",
    "pp": "--pp",
    "enable_expert_parallel": "--enable-expert-parallel",
    "data_parallel_size": "--data-parallel-size",
    "all2all_backend": "--all2all-backend",
    "expert_load_imbalance": "--expert-load-imbalance",
    "weight_dtype": "--weight-dtype",
    "precision_overrides": "--precision",
    "kv_cache_dtype": "--kv-dtype",
    "max_model_len": "--max-model-len",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "block_size": "--block-size",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "engine": "--engine",
    "engine_version": "--engine-version",
    "enable_chunked_prefill": "--enable-chunked-prefill / --no-chunked-prefill",
    "scheduling_policy": "--scheduling-policy",
    "input_len": "--input-len",
    "output_len": "--output-len",
    "images_per_request": "--images-per-request",
    "image_size": "--image-size",
    "batch_size": "--batch",
    "method": "--speculative-method",
    "num_speculative_tokens": "--num-speculative-tokens",
    "acceptance_rate": "--acceptance-rate",
    "draft_model": "--draft-model",
    "max_loras": "--max-loras",
    "max_lora_rank": "--max-lora-rank",
    "max_cpu_loras": "--max-cpu-loras",
    "lora_dtype": "--lora-dtype",
}


# ---------------------------------------------------------------------------- numbers


class Number:
    """argparse type of a numeric flag: an int or a finite float within a range, else a usage error naming the flag.

    The range is given, or read from a pydantic field's constraints (``Number.of(int, "--tp", Scenario, "tp")``),
    so a flag and the field it fills cannot disagree. NaN and infinity are refused for every float flag;
    an integer of more than 30 digits is refused without being converted. Messages read like the ones
    ``describe_validation_error`` makes from pydantic: "--tp must be greater than or equal to 1 (got 0)".
    """

    MAX_DIGITS = 30

    def __init__(
        self,
        kind: type,
        flag: str,
        *,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        lt: float | None = None,
        scale: float = 1.0,
        hint: str = "",
    ):
        self.kind, self.flag, self.hint, self.scale = kind, flag, hint, scale
        self.ge, self.gt, self.le, self.lt = ge, gt, le, lt
        self.__name__ = kind.__name__  # argparse's "invalid int value: 'abc'"

    @classmethod
    def of(
        cls, kind: type, flag: str, model: type[BaseModel], field: str, *, scale: float = 1.0, **overrides: Any
    ) -> Number:
        """The range of ``model.field`` (annotated_types Ge/Gt/Le/Lt), divided by ``scale`` (e.g. bytes -> GiB)."""
        bounds: dict[str, Any] = {}
        for item in model.model_fields[field].metadata:
            for name in ("ge", "gt", "le", "lt"):
                if getattr(item, name, None) is not None:
                    bounds[name] = getattr(item, name) / scale if scale != 1.0 else getattr(item, name)
        return cls(kind, flag, **{**bounds, **overrides}, scale=scale)

    def describe(self) -> str:
        """'>= 1 and <= 1,024', '> 0 and <= 1', '>= 0'."""
        parts = [
            f"{op} {_num(v)}"
            for op, v in ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt))
            if v is not None
        ]
        return " and ".join(parts) or "any finite number"

    def __call__(self, text: str) -> int | float:
        shown = text.strip()
        digits = shown.lstrip("+-")
        if self.kind is int and digits.isdigit() and len(digits) > self.MAX_DIGITS:
            self._refuse(f"must be {self.describe()} (got a {len(digits):,}-digit number)")
        value = self.kind(shown)  # ValueError: argparse's "invalid int value"
        if isinstance(value, float) and not math.isfinite(value):
            self._refuse(f"must be a finite number {self.describe()} (got {shown!r})")
        for op, bound, ok in (
            ("greater than or equal to", self.ge, lambda v, b: v >= b),
            ("greater than", self.gt, lambda v, b: v > b),
            ("less than or equal to", self.le, lambda v, b: v <= b),
            ("less than", self.lt, lambda v, b: v < b),
        ):
            if bound is not None and not ok(value, bound):
                self._refuse(f"must be {op} {_num(bound)} (got {shown}); allowed: {self.describe()}")
        return value

    def _refuse(self, message: str) -> NoReturn:
        # ArgumentError without an action: argparse prints the message as it is, so it can name the flag
        # first ("--tp must be ..."), as describe_validation_error does for the same field.
        raise argparse.ArgumentError(None, f"{self.flag} {message}." + (f" {self.hint}" if self.hint else ""))


def _num(value: float) -> str:
    """1024 -> '1,024', 0.5 -> '0.5', 16.0 -> '16'."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


# ----------------------------------------------------------------------------- the model


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    """Positional MODEL plus where to look for it (``--hf-token``, ``--revision``, ``--source``)."""
    parser.add_argument(
        "model",
        metavar="MODEL",
        help="Hub repo id (org/name), a path to a config.json or to a folder holding one, or a catalog "
        "name or alias (python -m planner models lists them).",
    )
    parser.add_argument(
        "--hf-token",
        metavar="TOKEN",
        default=None,
        help="Hugging Face token for gated or private repos (default: $HF_TOKEN, else your saved login). "
        "It is sent to the Hub only and never printed.",
    )
    parser.add_argument(
        "--revision", metavar="REV", default=None, help="Hub branch, tag or commit of config.json (default: main)."
    )
    parser.add_argument(
        "--source",
        choices=("auto", "hub", "catalog"),
        default="auto",
        help="auto: local path, then the bundled catalog, then the Hub; hub: ask the Hub first; catalog: "
        "never touch the network. Default: %(default)s.",
    )


def hf_token(args: argparse.Namespace) -> str | None:
    """The token to send: --hf-token, else $HF_TOKEN; None lets huggingface_hub use a saved login."""
    return getattr(args, "hf_token", None) or os.environ.get("HF_TOKEN") or None


def load_model(args: argparse.Namespace) -> tuple[ModelSpec, LoadedConfig]:
    """Load MODEL's config.json and build its spec; loader and parser warnings go to stderr."""
    loaded = load_config(args.model, token=hf_token(args), revision=args.revision, prefer=args.source)
    spec = build_spec(loaded.config, loaded.name)
    for message in (*loaded.warnings, *spec.warnings):
        warn(message)
    return spec, loaded


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


# -------------------------------------------------------------------------- the scenario


def add_chunked_prefill_flags(group: Any) -> None:
    """``--enable-chunked-prefill`` / ``--no-chunked-prefill`` (vLLM's ``--no-enable-chunked-prefill`` too) into
    ``args.chunked_prefill``: True, False, or None (neither given: the engine's default at its version)."""
    flags = group.add_mutually_exclusive_group()
    flags.add_argument(
        "--enable-chunked-prefill",
        dest="chunked_prefill",
        action="store_const",
        const=True,
        default=None,
        help="Turn chunked prefill on (vLLM --enable-chunked-prefill).",
    )
    flags.add_argument(
        "--no-chunked-prefill",
        "--no-enable-chunked-prefill",
        dest="chunked_prefill",
        action="store_const",
        const=False,
        help="Turn chunked prefill off (vLLM --no-enable-chunked-prefill). Neither flag: the engine's default at "
        "--engine-version (vLLM V1 and SGLang on; TensorRT-LLM off; vLLM V0 off but above 32K tokens of context).",
    )


def _described(model: type[BaseModel], field: str, extra: str = "") -> str:
    text = (model.model_fields[field].description or "").replace("%", "%%")
    return f"{text} {extra}".strip()


def _default(model: type[BaseModel], field: str) -> Any:
    return model.model_fields[field].default


def add_scenario_flags(parser: argparse.ArgumentParser, *, workload: bool = True) -> None:
    """The deployment flags shared by plan, roofline, latency, export (and later simulate)."""
    s = parser.add_argument_group("scenario (flags named as vLLM names them)")
    s.add_argument(
        "--gpu",
        metavar="ID",
        default=_default(Scenario, "gpu"),
        help=_described(Scenario, "gpu", "Default: %(default)s."),
    )
    s.add_argument(
        "--num-gpus",
        metavar="N",
        type=Number.of(int, "--num-gpus", Scenario, "num_gpus"),
        default=None,
        help=_described(Scenario, "num_gpus"),
    )
    s.add_argument(
        "--tp",
        "--tensor-parallel-size",
        dest="tp",
        metavar="N",
        type=Number.of(int, "--tp", Scenario, "tp"),
        default=_default(Scenario, "tp"),
        help=_described(Scenario, "tp", "Default: %(default)s."),
    )
    s.add_argument(
        "--pp",
        "--pipeline-parallel-size",
        dest="pp",
        metavar="N",
        type=Number.of(int, "--pp", Scenario, "pp"),
        default=_default(Scenario, "pp"),
        help=_described(Scenario, "pp", "Default: %(default)s."),
    )
    s.add_argument(
        "--num-nodes",
        metavar="N",
        type=Number.of(int, "--num-nodes", Scenario, "num_nodes"),
        default=None,
        help=_described(Scenario, "num_nodes"),
    )
    s.add_argument(
        "--enable-expert-parallel",
        action="store_true",
        help=_described(Scenario, "enable_expert_parallel", "Default: off."),
    )
    s.add_argument(
        "--data-parallel-size",
        metavar="N",
        type=Number.of(int, "--data-parallel-size", Scenario, "data_parallel_size"),
        default=_default(Scenario, "data_parallel_size"),
        help=_described(Scenario, "data_parallel_size", "Default: %(default)s."),
    )
    s.add_argument(
        "--all2all-backend",
        choices=("allgather_reducescatter", "deepep_low_latency", "deepep_high_throughput"),
        default=_default(Scenario, "all2all_backend"),
        help=_described(Scenario, "all2all_backend", "Default: %(default)s."),
    )
    s.add_argument(
        "--expert-load-imbalance",
        metavar="X",
        type=Number.of(float, "--expert-load-imbalance", Scenario, "expert_load_imbalance"),
        default=_default(Scenario, "expert_load_imbalance"),
        help=_described(Scenario, "expert_load_imbalance", "Default: %(default)s."),
    )
    s.add_argument(
        "--weight-dtype",
        metavar="D",
        default=_default(Scenario, "weight_dtype"),
        help=_described(Scenario, "weight_dtype", "Default: %(default)s."),
    )
    s.add_argument(
        "--precision",
        metavar="COMPONENT=DTYPE",
        action="append",
        default=[],
        help="Mixed precision, repeatable: e.g. --precision mlp=int4 --precision lm_head=bf16. "
        + _described(Scenario, "precision_overrides"),
    )
    s.add_argument(
        "--kv-dtype",
        "--kv-cache-dtype",
        dest="kv_cache_dtype",
        metavar="D",
        default=_default(Scenario, "kv_cache_dtype"),
        help=_described(Scenario, "kv_cache_dtype", "Default: %(default)s."),
    )
    s.add_argument(
        "--max-model-len",
        metavar="N",
        type=Number.of(int, "--max-model-len", Scenario, "max_model_len"),
        default=None,
        help=_described(Scenario, "max_model_len"),
    )
    s.add_argument(
        "--gpu-memory-utilization",
        metavar="F",
        type=Number.of(float, "--gpu-memory-utilization", Scenario, "gpu_memory_utilization"),
        default=_default(Scenario, "gpu_memory_utilization"),
        help=_described(Scenario, "gpu_memory_utilization"),
    )
    s.add_argument(
        "--block-size",
        metavar="N",
        type=Number.of(int, "--block-size", Scenario, "block_size"),
        default=None,
        help=_described(Scenario, "block_size"),
    )
    s.add_argument(
        "--max-num-seqs",
        metavar="N",
        type=Number.of(int, "--max-num-seqs", Scenario, "max_num_seqs"),
        default=None,
        help=_described(Scenario, "max_num_seqs"),
    )
    s.add_argument(
        "--max-num-batched-tokens",
        metavar="N",
        type=Number.of(int, "--max-num-batched-tokens", Scenario, "max_num_batched_tokens"),
        default=None,
        help=_described(Scenario, "max_num_batched_tokens"),
    )
    s.add_argument(
        "--engine",
        choices=("eager", "cuda-graphs"),
        default=_default(Scenario, "engine"),
        help=_described(Scenario, "engine", "Default: %(default)s."),
    )
    s.add_argument("--enforce-eager", action="store_true", help="Same as --engine eager (vLLM's flag).")
    s.add_argument(
        "--disable-custom-all-reduce",
        action="store_true",
        help=_described(Scenario, "disable_custom_all_reduce"),
    )
    s.add_argument(
        "--engine-version",
        metavar="ENGINE@VERSION",
        default=None,
        help=_described(
            Scenario,
            "engine_version",
            f"Default: {_default(Scenario, 'engine_version')}; a bare version (0.15.1) means vLLM.",
        ),
    )
    add_chunked_prefill_flags(s)
    s.add_argument(
        "--scheduling-policy",
        choices=("fcfs", "priority"),
        default=_default(Scenario, "scheduling_policy"),
        help=f"{Scenario.model_fields['scheduling_policy'].description} Default: %(default)s.",
    )
    s.add_argument(
        "--non-torch-memory-gib",
        metavar="GIB",
        default=None,
        type=Number.of(float, "--non-torch-memory-gib", Scenario, "non_torch_memory_bytes", scale=GiB),
        help=_described(Scenario, "non_torch_memory_bytes", "Given in GiB here (2**30 bytes)."),
    )
    s.add_argument(
        "--cuda-graph-memory-gib",
        metavar="GIB",
        default=None,
        type=Number.of(float, "--cuda-graph-memory-gib", Scenario, "cuda_graph_memory_bytes", scale=GiB),
        help=_described(Scenario, "cuda_graph_memory_bytes", "Given in GiB here (2**30 bytes)."),
    )
    add_lora_flags(parser)
    images = parser.add_argument_group("images (multimodal models; the memory plan counts the encoder with them)")
    images.add_argument(
        "--images-per-request",
        metavar="N",
        type=Number.of(int, "--images-per-request", RequestShape, "images_per_request"),
        default=_default(RequestShape, "images_per_request"),
        help=_described(RequestShape, "images_per_request", "Default: %(default)s."),
    )
    images.add_argument(
        "--image-size",
        metavar="WxH",
        type=image_size_arg,
        default=None,
        help=_described(RequestShape, "image_size"),
    )
    if workload:
        w = parser.add_argument_group("workload")
        w.add_argument(
            "--batch",
            "--batch-size",
            dest="batch_size",
            metavar="N",
            type=Number.of(int, "--batch", RequestShape, "batch_size"),
            default=_default(RequestShape, "batch_size"),
            help=_described(RequestShape, "batch_size", "Default: %(default)s."),
        )
        w.add_argument(
            "--input-len",
            metavar="N",
            type=Number.of(int, "--input-len", RequestShape, "input_len"),
            default=_default(RequestShape, "input_len"),
            help=_described(RequestShape, "input_len", "Default: %(default)s."),
        )
        w.add_argument(
            "--output-len",
            metavar="N",
            type=Number.of(int, "--output-len", RequestShape, "output_len"),
            default=_default(RequestShape, "output_len"),
            help=_described(RequestShape, "output_len", "Default: %(default)s."),
        )


def image_size_arg(text: str) -> tuple[int, int]:
    """``--image-size``: ``planner.scenario.parse_image_size``, its refusal in argparse's words."""
    try:
        return parse_image_size(text)
    except ScenarioError:
        raise argparse.ArgumentTypeError(
            f"--image-size expects WIDTHxHEIGHT in pixels, e.g. 896x896 (got '{text[:40]}')."
        ) from None


def parse_precision(items: Iterable[str]) -> dict[str, str]:
    """['mlp=int4', 'lm_head=bf16'] -> {'mlp': 'int4', 'lm_head': 'bf16'}; the core checks the names."""
    out: dict[str, str] = {}
    for item in items:
        component, sep, dtype = item.partition("=")
        if not sep or not component.strip() or not dtype.strip():
            raise ScenarioError(
                f"--precision expects COMPONENT=DTYPE, got '{item}'.",
                hint="For example --precision mlp=int4 --precision lm_head=bf16 "
                "(components: embedding, attention, mlp, experts, mamba, lm_head).",
            )
        out[component.strip().lower()] = dtype.strip().lower()
    return out


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The Scenario the flags describe (pydantic validates the ranges; the core checks the rest)."""
    workload = RequestShape(
        input_len=getattr(args, "input_len", _default(RequestShape, "input_len")),
        output_len=getattr(args, "output_len", _default(RequestShape, "output_len")),
        batch_size=getattr(args, "batch_size", _default(RequestShape, "batch_size")),
        images_per_request=getattr(args, "images_per_request", _default(RequestShape, "images_per_request")),
        image_size=getattr(args, "image_size", None),
    )
    return Scenario(
        gpu=args.gpu,
        num_gpus=args.num_gpus,
        tp=args.tp,
        pp=args.pp,
        num_nodes=getattr(args, "num_nodes", None),
        enable_expert_parallel=getattr(args, "enable_expert_parallel", False),
        data_parallel_size=getattr(args, "data_parallel_size", 1),
        all2all_backend=getattr(args, "all2all_backend", None) or _default(Scenario, "all2all_backend"),
        expert_load_imbalance=getattr(args, "expert_load_imbalance", None)
        or _default(Scenario, "expert_load_imbalance"),
        weight_dtype=args.weight_dtype,
        precision_overrides=parse_precision(args.precision),
        kv_cache_dtype=args.kv_cache_dtype,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        block_size=args.block_size,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        engine="eager" if args.enforce_eager else args.engine,
        disable_custom_all_reduce=getattr(args, "disable_custom_all_reduce", False),
        engine_version=getattr(args, "engine_version", None) or _default(Scenario, "engine_version"),
        enable_chunked_prefill=args.chunked_prefill,
        scheduling_policy=getattr(args, "scheduling_policy", None) or _default(Scenario, "scheduling_policy"),
        non_torch_memory_bytes=_gib_to_bytes(getattr(args, "non_torch_memory_gib", None)),
        cuda_graph_memory_bytes=_gib_to_bytes(getattr(args, "cuda_graph_memory_gib", None)),
        workload=workload,
        speculative=speculative_from_args(args),
        lora=lora_from_args(args),
    )


#: The LoRA flags (argparse dest) and the LoRA field each sets; --lora-config fills ``adapter``.
LORA_FLAGS = {"max_loras": "max_loras", "max_lora_rank": "max_lora_rank", "max_cpu_loras": "max_cpu_loras"}


def add_lora_flags(parser: argparse.ArgumentParser) -> None:
    """--enable-lora, --max-loras, --max-lora-rank, --max-cpu-loras, --lora-dtype, --lora-config (vLLM's names)."""
    g = parser.add_argument_group("LoRA adapters (vLLM --enable-lora)")
    g.add_argument("--enable-lora", action="store_true", help="Serve LoRA adapters (vLLM --enable-lora). Default: off.")
    g.add_argument(
        "--max-loras",
        metavar="N",
        default=None,
        type=Number.of(int, "--max-loras", LoRA, "max_loras"),
        help=_described(LoRA, "max_loras"),
    )
    g.add_argument(
        "--max-lora-rank",
        metavar="R",
        default=None,
        type=Number(int, "--max-lora-rank", ge=min(LORA_RANKS), le=max(LORA_RANKS)),
        choices=LORA_RANKS,
        help=_described(LoRA, "max_lora_rank"),
    )
    g.add_argument(
        "--max-cpu-loras",
        metavar="N",
        default=None,
        type=Number.of(int, "--max-cpu-loras", LoRA, "max_cpu_loras"),
        help=_described(LoRA, "max_cpu_loras"),
    )
    g.add_argument(
        "--lora-dtype", choices=("auto", "float16", "bfloat16"), default=None, help=_described(LoRA, "lora_dtype")
    )
    g.add_argument(
        "--lora-config",
        metavar="FILE",
        default=None,
        help="A PEFT adapter_config.json (or its folder): its rank r must be at most --max-lora-rank.",
    )


def lora_from_args(args: argparse.Namespace) -> LoRA | None:
    """The LoRA the flags describe; None without --enable-lora (the other LoRA flags are then refused)."""
    from planner.estimate.lora import load_adapter_config  # the estimate floor, for the flags that use it

    given = {flag: getattr(args, flag, None) for flag in (*LORA_FLAGS, "lora_dtype", "lora_config")}
    if not getattr(args, "enable_lora", False):
        stray = [f"--{flag.replace('_', '-')}" for flag, value in given.items() if value is not None]
        if stray:
            raise ScenarioError(
                f"{', '.join(stray)} given without --enable-lora.", hint="Add --enable-lora, or drop them."
            )
        return None
    fields: dict[str, Any] = {field: given[flag] for flag, field in LORA_FLAGS.items() if given[flag] is not None}
    if given["lora_dtype"] is not None:
        fields["lora_dtype"] = given["lora_dtype"]
    if given["lora_config"] is not None:
        fields["adapter"] = load_adapter_config(given["lora_config"])
    return LoRA(**fields)


#: The speculative-decoding flags and the SpeculativeDecoding field each sets.
SPECULATIVE_FLAGS = {
    "speculative_method": "method",
    "num_speculative_tokens": "num_speculative_tokens",
    "acceptance_rate": "acceptance_rate",
    "draft_model": "draft_model",
}


def add_speculative_flags(parser: argparse.ArgumentParser) -> None:
    """--speculative-method, --num-speculative-tokens, --acceptance-rate, --draft-model (vLLM --speculative-config)."""
    g = parser.add_argument_group("speculative decoding (vLLM --speculative-config)")
    S = SpeculativeDecoding
    g.add_argument(
        "--speculative-method",
        choices=("ngram", "draft", "eagle", "eagle3", "mtp"),
        default=None,
        help=_described(S, "method", "Default: off."),
    )
    g.add_argument(
        "--num-speculative-tokens",
        metavar="K",
        default=None,
        type=Number.of(int, "--num-speculative-tokens", S, "num_speculative_tokens"),
        help=_described(S, "num_speculative_tokens", "Required with --speculative-method."),
    )
    g.add_argument(
        "--acceptance-rate",
        metavar="A",
        default=None,
        type=Number.of(float, "--acceptance-rate", S, "acceptance_rate"),
        help=_described(S, "acceptance_rate", "Required with --speculative-method."),
    )
    g.add_argument("--draft-model", metavar="MODEL", default=None, help=_described(S, "draft_model"))


def speculative_from_args(args: argparse.Namespace) -> SpeculativeDecoding | None:
    """The SpeculativeDecoding the flags describe; None without --speculative-method (the others then refused)."""
    given = {flag: getattr(args, flag, None) for flag in SPECULATIVE_FLAGS}
    if given["speculative_method"] is None:
        stray = [f"--{flag.replace('_', '-')}" for flag, value in given.items() if value is not None]
        if stray:
            raise ScenarioError(
                f"{', '.join(stray)} given without --speculative-method.",
                hint="Add --speculative-method ngram|draft|eagle|eagle3|mtp, or drop them.",
            )
        return None
    for flag in ("num_speculative_tokens", "acceptance_rate"):
        if given[flag] is None:
            raise ScenarioError(
                f"--speculative-method {given['speculative_method']} needs --{flag.replace('_', '-')}.",
                hint="For example --num-speculative-tokens 3 --acceptance-rate 0.7 (a from vLLM's "
                "logged mean acceptance length L and k: L = (1 - a^(k+1)) / (1 - a)).",
            )
    return SpeculativeDecoding(**{field: given[flag] for flag, field in SPECULATIVE_FLAGS.items()})


def load_draft_model(args: argparse.Namespace) -> ModelSpec | None:
    """The draft model's spec for --speculative-method draft (loaded as MODEL is), else None."""
    if getattr(args, "speculative_method", None) != "draft" or not getattr(args, "draft_model", None):
        return None
    loaded = load_config(args.draft_model, token=hf_token(args), prefer=args.source)
    spec = build_spec(loaded.config, loaded.name)
    for message in (*loaded.warnings, *spec.warnings):
        warn(f"--draft-model: {message}")
    return spec


def _gib_to_bytes(gib: float | None) -> int | None:
    """A GiB figure from the command line in bytes (the core's unit); None stays None."""
    return None if gib is None else round(gib * GiB)


def hardware_from_args(args: argparse.Namespace) -> HardwareProfile:
    return get_profile(args.gpu)


# ----------------------------------------------------------------------------- prices

PRICE_FLAG = "--price-per-gpu-hour"


def _price_item(text: str) -> tuple[str | None, float]:
    """argparse type of --price-per-gpu-hour: 'h200=3.5' -> ('h200', 3.5), '3.5' -> (None, 3.5).

    The number must be finite and > 0 (a usage error naming the flag otherwise); the card is checked
    against the profiles later, by ``prices_from_args``.
    """
    card, sep, value = text.rpartition("=")
    if sep and not card.strip():
        raise argparse.ArgumentError(None, f"{PRICE_FLAG} {text!r} names no card; write CARD=USD, e.g. h200=3.5.")
    try:
        price = Number(float, PRICE_FLAG, gt=0, hint="US dollars per GPU-hour, e.g. h200=3.5 or 3.5.")(value)
    except ValueError:
        raise argparse.ArgumentError(
            None,
            f"{PRICE_FLAG} {text!r} is not a price; write USD or CARD=USD "
            "(US dollars per GPU-hour), e.g. 3.5 or h200=3.5.",
        ) from None
    return (card.strip() or None, float(price))


def add_price_flag(parser: argparse._ActionsContainer, *, several_cards: bool) -> None:
    """--price-per-gpu-hour: the user's $/GPU-hour, over the profiles' cited on-demand price.

    ``parser`` is a parser or one of its argument groups (argparse's common base, which has add_argument).
    """
    per_card = (
        "Repeat as CARD=USD for each card, e.g. --price-per-gpu-hour h200=3.5 --price-per-gpu-hour b200=6; "
        "a bare USD prices the card when --gpus names one."
        if several_cards
        else "USD prices the --gpu card (CARD=USD also works)."
    )
    parser.add_argument(
        PRICE_FLAG,
        dest="price_per_gpu_hour",
        action="append",
        type=_price_item,
        default=[],
        metavar="[CARD=]USD",
        help="Your on-demand price of one GPU for one hour, in US dollars; replaces the profile's "
        f"price_per_hour_usd (python -m planner hardware lists them and their sources). {per_card}",
    )


def prices_from_args(args: argparse.Namespace, cards: Sequence[str]) -> dict[str, float]:
    """{profile id: USD per GPU-hour} from --price-per-gpu-hour; a bare USD prices ``cards`` when it is one card.

    Unknown cards, two prices for one card, and a bare USD with several cards raise a PlannerError naming the flag.
    """
    from planner.hardware import resolve_prices

    items = getattr(args, "price_per_gpu_hour", None) or []
    named: dict[str, float] = {}
    for card, price in items:
        if card is None:
            if len(cards) != 1:
                raise ScenarioError(
                    f"{PRICE_FLAG} {price:g} names no card, and {len(cards)} cards are tried ({', '.join(cards)}).",
                    hint=f"Write CARD=USD for each, e.g. {PRICE_FLAG} {cards[0]}={price:g}.",
                )
            card = cards[0]
        key = card.lower()
        if key in named and named[key] != price:
            raise ScenarioError(
                f"{PRICE_FLAG} prices {card} twice (${named[key]:g} and ${price:g}).", hint="Give each card one price."
            )
        named[key] = price
    return resolve_prices(named, PRICE_FLAG)


def add_efficiency_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bound",
        action="store_true",
        help="Pure roofline: datasheet peaks, no efficiency factors or overheads (every figure is a bound). "
        "Default: the card's calibration if it has one, else the planner's fitted estimate.",
    )


def efficiency_from_args(args: argparse.Namespace, hw: HardwareProfile) -> Efficiency:
    """BOUND with --bound; else the card's calibration, or the fitted factors of --engine-version's profile."""
    # the roofline (and with it numpy) is imported only by the commands that time something
    from planner.estimate.roofline import efficiency_for

    engine = Scenario(engine_version=getattr(args, "engine_version", None) or _default(Scenario, "engine_version"))
    return efficiency_for(hw, "bound" if getattr(args, "bound", False) else "auto", sc=engine)


def add_disagg_flags(parser: argparse.ArgumentParser, purpose: str) -> None:
    """The disaggregated prefill/decode layout (xPyD): ``simulate`` compares it, ``export`` writes it."""
    from planner.serve.disagg import KV_LINK_KINDS, DisaggLayout  # the serving layer, only where it is taken

    d = parser.add_argument_group(f"disaggregated prefill/decode (xPyD): {purpose}")
    for flag, key, what in (
        (
            "--prefill-instances",
            "prefill_instances",
            "Prefill instances (x of xPyD); giving it turns the comparison on.",
        ),
        ("--prefill-tp", "prefill_tp", "Tensor-parallel size of each prefill instance. Default: 1."),
        ("--decode-instances", "decode_instances", "Decode instances (y of xPyD). Default: 1."),
        ("--decode-tp", "decode_tp", "Tensor-parallel size of each decode instance. Default: 1."),
    ):
        d.add_argument(flag, metavar="N", default=None, type=Number.of(int, flag, DisaggLayout, key), help=what)
    d.add_argument(
        "--kv-transfer-link",
        choices=KV_LINK_KINDS,
        default=None,
        help="How the KV cache goes from a prefill to a decode instance (planner.serve.disagg KV_LINKS, cited). "
        "Default: rdma.",
    )


def disagg_layout_from_args(args: argparse.Namespace) -> DisaggLayout | None:
    """The xPyD layout the disaggregation flags give, or None when --prefill-instances is not given."""
    from planner.serve.disagg import DisaggLayout

    keys = ("prefill_tp", "decode_instances", "decode_tp", "kv_transfer_link")
    if args.prefill_instances is None:
        stray = [f"--{k.replace('_', '-')}" for k in keys if getattr(args, k) is not None]
        if stray:
            raise ScenarioError(
                f"{', '.join(stray)} describe a disaggregated layout, which --prefill-instances turns on.",
                hint="Add --prefill-instances N (and --decode-instances N), or drop them.",
            )
        return None
    given = {k: getattr(args, k) for k in ("prefill_instances", *keys) if getattr(args, k) is not None}
    return DisaggLayout(**given)


#: Most items a comma-separated flag takes (each is simulated or planned; every combination, for ``slo``).
MAX_LIST_ITEMS = 32


def comma_list(convert: Callable[[str], Any], what: str) -> Callable[[str], tuple]:
    """argparse type: 'a,b,c' -> (convert(a), ...); a bad item is a usage error naming it.

    At most MAX_LIST_ITEMS items; ``convert`` may be a ``Number``, whose range errors pass through.
    """

    def parse(text: str) -> tuple:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}, got {text!r}")
        if len(items) > MAX_LIST_ITEMS:
            raise argparse.ArgumentTypeError(
                f"{len(items)} items; a candidate list takes at most {MAX_LIST_ITEMS} "
                "(every combination of the lists is simulated)"
            )
        out = []
        for item in items:
            try:
                out.append(convert(item))
            except ValueError:
                raise argparse.ArgumentTypeError(f"{item!r} is not {what}") from None
        return tuple(out)

    return parse


def describe_validation_error(err: ValidationError) -> str:
    """A pydantic error on user input, as flags: '--tp must be greater than or equal to 1 (got 0)'."""
    lines = []
    for item in err.errors():
        loc = [str(p) for p in item.get("loc", ())]
        name = next((FIELD_FLAGS[p] for p in reversed(loc) if p in FIELD_FLAGS), ".".join(loc) or "input")
        message = str(item.get("msg", "invalid value")).replace("Input should be", "must be")
        message = message.removeprefix("Value error, ")
        got = item.get("input")
        shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
        lines.append(f"{name} {message[0].lower() + message[1:]}{shown}")
    return "; ".join(lines) + "."


# ---------------------------------------------------------------------------- rendering


def to_jsonable(obj: Any) -> Any:
    """Pydantic models, dicts, lists -> plain JSON data; non-finite floats become None (unknown)."""
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _console(buffer: io.StringIO) -> Console:
    from rich.console import Console

    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size((140, 24)).columns if tty else 140
    return Console(
        file=buffer,
        width=max(width, 100),
        force_terminal=tty,
        no_color=not tty,
        color_system="auto" if tty else None,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
    )


def render(*items: Any) -> str:
    """Rich renderables (tables, texts) as a string: coloured on a terminal, plain text otherwise."""
    buffer = io.StringIO()
    console = _console(buffer)
    for item in items:
        console.print(item)
    text = buffer.getvalue()
    return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n"))


KIND_STYLES = {"bound": "cyan", "estimate": "yellow", "calibrated": "green", "exact": "", "datasheet": ""}


def kind_text(kind: str) -> Text:
    """The label of a predicted number (bound / estimate / calibrated / exact), coloured on a terminal."""
    from rich.text import Text

    return Text(kind, style=KIND_STYLES.get(kind, ""))


def table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None, right: Sequence[int] = ()
) -> Table:
    """A plain table: header row, then rows; column indexes in ``right`` are right-aligned (numbers)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", show_edge=False, pad_edge=False)
    for i, name in enumerate(columns):
        t.add_column(name, justify="right" if i in right else "left", overflow="fold")
    for row in rows:
        t.add_row(*[cell if isinstance(cell, Text) else Text("" if cell is None else str(cell)) for cell in row])
    return t


def field_descriptions(model: type[BaseModel], exclude: Sequence[str] = ()) -> dict[str, str]:
    """{field: description} of a pydantic model, for a command's OUTPUT_KEYS (and so for docs/cli.md)."""
    return {name: f.description or "" for name, f in model.model_fields.items() if name not in exclude}


def heading(text: str) -> Text:
    from rich.text import Text

    return Text(text, style="bold")


def fmt_bandwidth(bytes_per_s: float | None) -> str:
    """'3.35 TB/s', '900 GB/s' (decimal, as datasheets quote bandwidth)."""
    if bytes_per_s is None:
        return "unknown"
    if bytes_per_s >= 1e12:
        return f"{bytes_per_s / 1e12:,.2f} TB/s"
    return f"{bytes_per_s / 1e9:,.0f} GB/s"


def fmt_flops(flops_per_s: float | None) -> str:
    """'989.4 TFLOP/s' (decimal)."""
    return "unknown" if flops_per_s is None else f"{flops_per_s / 1e12:,.1f} TFLOP/s"


__all__ = [
    "FORMATS",
    "Number",
    "add_efficiency_flag",
    "add_lora_flags",
    "add_model_argument",
    "add_scenario_flags",
    "add_speculative_flags",
    "describe_validation_error",
    "efficiency_from_args",
    "field_descriptions",
    "fmt_bandwidth",
    "fmt_bytes",
    "fmt_count",
    "fmt_flop_count",
    "fmt_flops",
    "fmt_gib",
    "fmt_int",
    "fmt_seconds",
    "hardware_from_args",
    "heading",
    "hf_token",
    "kind_text",
    "load_draft_model",
    "load_model",
    "lora_from_args",
    "parse_precision",
    "render",
    "scenario_from_args",
    "table",
    "to_jsonable",
    "warn",
]
