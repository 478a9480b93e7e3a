"""Hardware profiles: what one accelerator offers, read from ``hardware_profiles/*.yaml``.

A :class:`HardwareProfile` answers "how many bytes fit, how fast they stream, how many FLOP/s
each dtype gets, how fast the GPUs talk": the datasheet ceilings the roofline divides by. One card
per YAML file; the built-in cards live in the top-level ``hardware_profiles/`` folder (installed as
``planner/hardware_profiles/``) and a
user adds or overrides cards through folders named in ``PLANNER_HARDWARE_DIR``.

Three traps this module guards against (see ``shared/reference/hardware.md``):

* FLOP/s are **dense**. NVIDIA datasheets print the 2:4-sparse figure, twice the dense one.
* ``memory_bytes`` is the total the CUDA runtime reports (``torch.cuda.mem_get_info()[1]``),
  which is what vLLM multiplies by ``gpu_memory_utilization``; it is 0.4-0.7 GiB below the
  ``nvidia-smi`` total (kept apart in ``memory_smi_bytes``) and below the marketed "80 GB".
* Interconnect bandwidths are quoted bidirectional; a transfer sees half
  (:attr:`HardwareProfile.unidirectional_interconnect_bytes_per_s`).
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, cast, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from planner.efficiency import Efficiency
from planner.errors import HardwareProfileError
from planner.units import GiB, MiB

Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]
InterconnectKind = Literal["nvlink3", "nvlink4", "nvlink5", "infinity-fabric", "roce", "pcie4", "pcie5", "none"]

DTYPES: tuple[str, ...] = get_args(Dtype)
INTERCONNECT_KINDS: tuple[str, ...] = get_args(InterconnectKind)


def _builtin_dir() -> Path:
    """The built-in cards: ``hardware_profiles/`` at the top of a checkout (the project's layout), which an
    installed wheel carries as ``planner/hardware_profiles/`` (pyproject.toml maps it there)."""
    installed = Path(__file__).resolve().parent / "hardware_profiles"
    return installed if installed.is_dir() else Path(__file__).resolve().parents[1] / "hardware_profiles"


BUILTIN_DIR = _builtin_dir()
"""The built-in cards' folder (see ``_builtin_dir``)."""

ENV_VAR = "PLANNER_HARDWARE_DIR"
"""Environment variable: folders of user cards, separated by ``os.pathsep``; they override built-ins."""

CALIBRATED_SUFFIX = "-calibrated"

# Where a dtype's math runs when the card has no unit for it. Low-precision *weights* on a card
# without matching tensor cores are served by weight-only kernels that dequantize to 16 bit and
# multiply in bf16/fp16 (vLLM's Marlin W8A16 / W4A16 on Ampere; hardware.md "Notes for the
# planner"), so the compute ceiling is the 16-bit one, not a faster low-precision one.
_FALLBACK: dict[str, tuple[Dtype, ...]] = {
    "fp4": ("bf16", "fp16"),
    "int4": ("bf16", "fp16"),
    "fp8": ("bf16", "fp16"),
    "int8": ("bf16", "fp16"),
    "fp16": ("bf16",),
    "bf16": ("fp16", "fp32"),
    "tf32": ("fp32",),
    "fp32": (),
}

_DTYPE_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "e4m3": "fp8",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "float4": "fp4",
}


def math_dtype(dtype: str) -> Dtype:
    """The math-unit dtype whose datasheet peak applies: 'bfloat16' -> 'bf16', 'FP8' -> 'fp8', 'nvfp4' -> 'fp4'.

    Unlike ``planner.model.quantization.canonical_dtype`` (spelling only) it folds formats into their
    tensor-core class and raises for names it does not know.
    """
    key = dtype.strip().lower().replace("torch.", "")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise HardwareProfileError(f"unknown dtype {dtype!r};", hint=f"use one of {', '.join(DTYPES)}.")
    return cast(Dtype, key)  # checked against DTYPES just above


class HardwareProfile(BaseModel):
    """One accelerator (or the host CPU): memory, bandwidth, dense FLOP/s per dtype, links, cost.

    Peaks are datasheet figures; how far below them an engine runs is ``efficiency``
    (``None``: the planner's defaults, see ``planner.efficiency``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(
        description="Identifier that --gpu takes, lowercase letters, digits, '.' and '-' (e.g. 'h100-sxm'); no unit.",
        pattern=r"^[a-z0-9][a-z0-9.\-]*$",
    )
    name: str = Field(min_length=1, description="Human-readable card name, e.g. 'NVIDIA H100 SXM5 80GB'; no unit.")
    vendor: str = Field(min_length=1, description="Maker of the card: NVIDIA, AMD, Intel, or 'generic'; no unit.")
    kind: Literal["gpu", "cpu"] = Field(description="'gpu' for an accelerator, 'cpu' for host-CPU runs; no unit.")
    memory_bytes: int = Field(
        gt=0,
        description="Device memory total as the CUDA/HIP runtime reports it (torch.cuda.mem_get_info()[1]), "
        "the figure vLLM multiplies by gpu_memory_utilization, in bytes (1 GiB = 2**30).",
    )
    memory_bytes_estimated: bool = Field(
        False,
        description="True when memory_bytes is an estimate (no public runtime printout of it was found); "
        "the notes say how it was derived. Unitless flag.",
    )
    memory_smi_bytes: int | None = Field(
        None,
        gt=0,
        description="Total that nvidia-smi / NVML prints, in bytes; larger than memory_bytes by the driver's "
        "reservation (0.4-0.7 GiB). None when not verified.",
    )
    memory_marketed_bytes: int | None = Field(
        None,
        gt=0,
        description="Vendor's marketed capacity taken literally as decimal GB x 10**9 (e.g. 80 GB -> 8e10), in bytes.",
    )
    hbm_bandwidth_bytes_per_s: float | None = Field(
        gt=0,
        description="Peak device-memory bandwidth, in bytes/s (3.35e12 = 3.35 TB/s); null when unknown.",
    )
    peak_flops_per_s: dict[Dtype, Annotated[float, Field(gt=0)]] = Field(
        description="Dense (no 2:4 sparsity) peak tensor/matrix throughput per dtype, in FLOP/s (ops/s for int). "
        "A dtype missing here has no native unit on this card.",
    )
    interconnect_kind: InterconnectKind | None = Field(
        description="Fastest GPU-to-GPU link inside a node: nvlink3/4/5, infinity-fabric, roce, pcie4/5, or none; "
        "null when unknown. No unit.",
    )
    interconnect_bandwidth_bytes_per_s: float | None = Field(
        None,
        gt=0,
        description="GPU-to-GPU bandwidth per GPU, bidirectional aggregate as vendors quote it (H100 NVLink 4: 9e11), "
        "in bytes/s; null when unknown or none.",
    )
    gpus_per_node: int = Field(
        ge=1,
        description="GPUs that share the fast interconnect domain in the usual server (8 for HGX, 72 for GB200 NVL72), "
        "a count.",
    )
    gpus_per_host: int | None = Field(
        None,
        ge=1,
        description="GPUs in one server (one Kubernetes node) when that differs from gpus_per_node, e.g. 4 per "
        "GB200 compute tray inside a 72-GPU NVLink domain; null means gpus_per_node. A count.",
    )
    inter_node_bandwidth_bytes_per_s: float | None = Field(
        None,
        gt=0,
        description="Scale-out network bandwidth per GPU, one direction, as NIC line rates are quoted "
        "(one 400 Gb/s InfiniBand port per GPU -> 5e10), in bytes/s; null when unknown.",
    )
    tdp_watts: float | None = Field(None, gt=0, description="Board power limit (TDP/TBP), in watts; null when unknown.")
    price_per_hour_usd: float | None = Field(
        None,
        gt=0,
        description="A typical on-demand cloud price for one GPU for one hour, in US dollars per GPU-hour; "
        "sources['price_per_hour_usd'] names the provider and date. Null when no source.",
    )
    aliases: tuple[str, ...] = Field(
        (), description="Other names get_profile accepts for this card (case-insensitive), e.g. 'h100'; no unit."
    )
    device_names: tuple[str, ...] = Field(
        (),
        description="Device names torch/NVML report for this card, e.g. 'NVIDIA H100 80GB HBM3', used by "
        "match_profile; no unit.",
    )
    compute_capability: str | None = Field(
        None,
        pattern=r"^\d+\.\d+$",
        description="CUDA compute capability as NVIDIA lists it (e.g. '9.0' for Hopper); it picks an engine's kernel "
        "backend and so the resident layout of some quantized weights (engine profile moe_weight_layouts). "
        "Null for a card without CUDA.",
    )
    sources: dict[str, str] = Field(
        default_factory=dict,
        description="Citation per field: field name (or 'peak_flops_per_s.fp8') -> URL or reference; no unit.",
    )
    confidence: Literal["A", "B", "C"] = Field(
        description="A: official vendor datasheet; B: vendor figure via secondary sources or derived; "
        "C: community-derived or rough. No unit.",
    )
    notes: str = Field("", description="Caveats a reader of the numbers needs; free text, no unit.")
    efficiency: Efficiency | None = Field(
        None, description="Achieved fractions of peak for this card; null means the planner's defaults."
    )
    calibration_info: dict[str, str] | None = Field(
        None,
        description="For a calibrated profile: card, driver, torch version, date, ... as text; null otherwise.",
    )

    @field_validator("aliases", "device_names")
    @classmethod
    def _no_blank_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for n in names:
            if not n.strip():
                raise ValueError("entries must be non-empty strings")
        return names

    @model_validator(mode="after")
    def _consistent(self) -> HardwareProfile:
        if self.memory_smi_bytes is not None and self.memory_bytes > self.memory_smi_bytes:
            raise ValueError(
                f"memory_bytes ({self.memory_bytes}) exceeds memory_smi_bytes ({self.memory_smi_bytes}); memory_bytes "
                f"is the CUDA-visible total, which is smaller than nvidia-smi's. Swap them?"
            )
        if self.interconnect_kind == "none" and self.interconnect_bandwidth_bytes_per_s is not None:
            raise ValueError(
                "interconnect_bandwidth_bytes_per_s is set but interconnect_kind is 'none'; name the link "
                "(e.g. pcie4) or set the bandwidth to null"
            )
        known = set(type(self).model_fields)
        for key in self.sources:
            if key.split(".", 1)[0] not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                tip = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"sources key {key!r} names no field{tip}")
        return self

    # --- derived quantities -------------------------------------------------------------------

    @property
    def host_gpus(self) -> int:
        """GPUs one server (Kubernetes node) holds: gpus_per_host, else gpus_per_node."""
        return self.gpus_per_host or self.gpus_per_node

    @property
    def is_calibrated(self) -> bool:
        """True when the efficiency factors were measured on this card (``efficiency.kind == 'calibrated'``)."""
        return self.efficiency is not None and self.efficiency.kind == "calibrated"

    @property
    def unidirectional_interconnect_bytes_per_s(self) -> float | None:
        """GPU-to-GPU bandwidth one way, bytes/s: the quoted bidirectional aggregate / 2.

        NVLink 4 on H100: 900 GB/s quoted -> 450 GB/s each way, the rate a ring all-reduce's
        send (or receive) stream sees. None when the link is unknown.
        """
        if self.interconnect_bandwidth_bytes_per_s is None:
            return None
        return self.interconnect_bandwidth_bytes_per_s / 2

    def known_hbm_bandwidth_bytes_per_s(self, what: str) -> float:
        """The HBM bandwidth ``what`` needs; a HardwareProfileError when the profile leaves it unknown.

        A detected card (``profile_from_detected``) has no bandwidth until the Validate benchmarks
        measure one; a roofline or a step time cannot be priced without it.
        """
        if self.hbm_bandwidth_bytes_per_s is None:
            raise HardwareProfileError(
                f"{what} needs the HBM bandwidth of {self.id}, which its profile leaves unknown (null).",
                hint="set hbm_bandwidth_bytes_per_s in the profile, or run `validate` to measure it.",
            )
        return self.hbm_bandwidth_bytes_per_s

    def has_native(self, dtype: str) -> bool:
        """Whether the card has matrix units for ``dtype`` (it is listed in ``peak_flops_per_s``).

        A100 has no FP8 tensor cores: ``has_native('fp8')`` is False and FP8 weights there run
        through weight-only kernels at the BF16 rate (see :meth:`compute_dtype_for`).
        """
        return math_dtype(dtype) in self.peak_flops_per_s

    def compute_dtype_for(self, dtype: str) -> Dtype | None:
        """The dtype whose units actually do ``dtype``'s math here: itself if native, else its fallback.

        Fallbacks: fp8/int8/fp4/int4 -> bf16 -> fp16 (weight-only kernels dequantize to 16 bit),
        fp16 <-> bf16, bf16 -> fp32 on CPUs without bf16 units, tf32 -> fp32. None when nothing
        applies (e.g. fp32 on a GPU profile that lists only tensor-core rates).
        """
        key = math_dtype(dtype)
        if key in self.peak_flops_per_s:
            return key
        for fallback in _FALLBACK[key]:
            if fallback in self.peak_flops_per_s:
                return fallback
        return None

    def peak_flops_for(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for math in ``dtype``, falling back as :meth:`compute_dtype_for` says.

        H100 SXM: ``peak_flops_for('fp8') == 1978.9e12``; A100: ``peak_flops_for('fp8') == 312e12``
        (the BF16 rate, since FP8 runs as W8A16 there; ``has_native('fp8')`` tells the two apart).
        None when the card has no rate for it.
        """
        compute = self.compute_dtype_for(dtype)
        return None if compute is None else self.peak_flops_per_s[compute]

    def ridge_point_flops_per_byte(self, dtype: str) -> float | None:
        """Arithmetic intensity (FLOP per byte of HBM traffic) above which ``dtype`` math is compute-bound.

        ridge = peak_flops_for(dtype) / hbm_bandwidth_bytes_per_s. H100 SXM, bf16:
        989.4e12 / 3.35e12 = 295.3 FLOP/B; a decode GEMV at batch 1 does ~1 FLOP/B for bf16 weights
        (2 FLOPs per 2-byte weight), far below it, hence memory-bound. None when either is unknown.
        """
        flops = self.peak_flops_for(dtype)
        if flops is None or self.hbm_bandwidth_bytes_per_s is None:
            return None
        return flops / self.hbm_bandwidth_bytes_per_s


# --- turning files into profiles ----------------------------------------------------------------

_FIELD_HINTS: dict[str, str] = {
    "id": "use lowercase letters, digits and '-', e.g. 'h100-sxm'",
    "name": "write the card's name, e.g. 'NVIDIA H100 SXM5 80GB'",
    "vendor": "write the maker, e.g. NVIDIA, AMD, Intel",
    "kind": "write gpu or cpu",
    "memory_bytes": "write the CUDA-visible total in bytes as an integer, e.g. 85027979264 for 81,089 MiB "
    "(H100 SXM; torch.cuda.mem_get_info()[1])",
    "memory_bytes_estimated": "write true or false",
    "memory_smi_bytes": "write nvidia-smi's total in bytes as an integer, e.g. 85520809984 for 81,559 MiB, or null",
    "memory_marketed_bytes": "write the marketed capacity in bytes as an integer, e.g. 80000000000 for 80 GB, or null",
    "hbm_bandwidth_bytes_per_s": "write the bandwidth in bytes/s, e.g. 3.35e12 for 3.35 TB/s (null if unknown)",
    "peak_flops_per_s": "map dtype to DENSE FLOP/s, e.g. {bf16: 989.4e12, fp8: 1978.9e12}, dtypes among "
    + ", ".join(DTYPES)
    + "; NVIDIA datasheets print the 2:4-sparse figure, halve it; leave out a dtype the card has no unit for",
    "interconnect_kind": "write one of " + ", ".join(INTERCONNECT_KINDS) + ", or null if unknown",
    "interconnect_bandwidth_bytes_per_s": "write the bidirectional per-GPU bandwidth in bytes/s, e.g. 9e11 for "
    "NVLink 4's 900 GB/s, or null",
    "gpus_per_node": "write a whole number of GPUs >= 1, e.g. 8",
    "gpus_per_host": "write the GPUs of one server as a whole number >= 1, e.g. 4, or leave it out",
    "inter_node_bandwidth_bytes_per_s": "write the per-GPU one-way network rate in bytes/s, e.g. 5e10 for one "
    "400 Gb/s port per GPU, or null",
    "tdp_watts": "write the board power in watts, e.g. 700, or null",
    "price_per_hour_usd": "write US dollars per GPU-hour, e.g. 2.99, or null when you have no source",
    "aliases": "write a list of names, e.g. [h100, h100-sxm5]",
    "device_names": "write a list of names as torch reports them, e.g. ['NVIDIA H100 80GB HBM3']",
    "compute_capability": "write the CUDA compute capability in quotes, e.g. '9.0', or null for a non-CUDA card",
    "sources": "map field name to a URL or citation, e.g. {hbm_bandwidth_bytes_per_s: https://...}",
    "confidence": "write A (vendor datasheet), B (secondary or derived) or C (community or rough)",
    "notes": "write free text",
    "efficiency": "see planner/efficiency.py for the keys, or null for the planner's defaults",
    "calibration_info": "map text keys to text values (card, driver, torch, date), or null",
}
_KNOWN_KEYS = tuple(HardwareProfile.model_fields)


def _display(path: Path) -> str:
    """A path as a reader finds it: relative to the working folder or the repo when possible."""
    for base in (Path.cwd(), BUILTIN_DIR.parent.parent):
        try:
            return str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            continue
    return str(path)


def _describe_error(err: Mapping[str, Any]) -> str:
    """One pydantic error as "key 'a.b' must ..., got X; <fix>"."""
    loc = [str(p) for p in err["loc"]]
    is_dict_key = "[key]" in loc
    loc = [p for p in loc if p != "[key]"]
    path = ".".join(loc)
    top = loc[0] if loc else ""
    hint = _FIELD_HINTS.get(top, "")
    kind = err["type"]
    got = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        text = f"required key '{path}' is missing"
    elif kind == "extra_forbidden":
        pool = _KNOWN_KEYS if len(loc) == 1 else tuple(Efficiency.model_fields)
        close = difflib.get_close_matches(loc[-1], pool, n=1)
        text = f"unknown key '{path}'"
        hint = f"did you mean '{close[0]}'?" if close else "known keys: " + ", ".join(pool)
    elif is_dict_key and top == "peak_flops_per_s":
        text = f"key '{path}' is not a dtype"
        hint = "use one of " + ", ".join(DTYPES)
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        bound = next(iter(ctx.values()), "?")
        bound = f"{bound:g}" if isinstance(bound, (int, float)) else bound
        text = f"key '{path}' must be {op} {bound}, got {got!r}"
    elif kind == "literal_error":
        text = f"key '{path}' must be {ctx.get('expected', 'one of the allowed values')}, got {got!r}"
    elif kind == "string_pattern_mismatch":
        text = f"key '{path}' has the wrong form, got {got!r}"
    elif kind == "value_error":
        reason = str(err["msg"]).removeprefix("Value error, ")
        text = f"key '{path}': {reason}" if path else reason
        hint = ""  # our validators' messages carry their own fix
    else:
        reason = str(err["msg"]).replace("Input should be", "must be", 1)
        text = f"key '{path}' {reason[0].lower() + reason[1:]}, got {got!r} ({type(got).__name__})"
    return f"{text}; {hint}" if hint else text


def _validation_message(source: str, exc: ValidationError) -> str:
    lines = [_describe_error(e) for e in exc.errors()]
    if len(lines) == 1:
        return f"{source}: {lines[0]}"
    return f"{source}: {len(lines)} problems:\n" + "\n".join(f"  - {line}" for line in lines)


def profile_from_mapping(data: Any, source: str = "<profile>") -> HardwareProfile:
    """Validate a parsed YAML mapping; errors name ``source``, the key path and the fix."""
    if not isinstance(data, Mapping):
        raise HardwareProfileError(
            f"{source}: expected a mapping of keys (id: ..., name: ...), got {type(data).__name__};",
            hint="see hardware_profiles/README.md for the schema.",
        )
    try:
        return HardwareProfile.model_validate(dict(data))
    except ValidationError as exc:
        raise HardwareProfileError(_validation_message(source, exc)) from None


#: libyaml's safe loader when PyYAML was built with it (several times faster), else the pure-Python one.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_profile(path: str | os.PathLike[str]) -> HardwareProfile:
    """Read one card YAML. A calibrated card keeps the id it was saved with (see :func:`load_profiles`)."""
    path = Path(path)
    shown = _display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise HardwareProfileError(f"{shown}: cannot read the file ({exc.strerror});", hint="check the path.") from None
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise HardwareProfileError(
            f"{shown}: YAML syntax error{where}: {problem};",
            hint="fix the indentation or quoting there (values with ':' or '#' need quotes).",
        ) from None
    return profile_from_mapping(data, shown)


def _is_calibrated_file(path: Path, profile: HardwareProfile) -> bool:
    return path.name.endswith((".calibrated.yaml", ".calibrated.yml")) or profile.is_calibrated


def _normalize(name: str) -> str:
    """'NVIDIA GeForce RTX 4090' -> 'rtx-4090'; 'H100 SXM' -> 'h100-sxm'; case and spacing ignored."""
    s = re.sub(r"[\s_/]+", "-", name.strip().lower())
    s = re.sub(r"-+", "-", s).strip("-")
    s = re.sub(r"^(nvidia|amd|intel)-", "", s)
    return re.sub(r"^geforce-", "", s)


class _Registry(NamedTuple):
    profiles: dict[str, HardwareProfile]
    origins: dict[str, Path]
    aliases: dict[str, str]  # normalized alias or device name -> id


#: Where calibrated profiles are written and read by default (the Validate benchmarks write here).
USER_DIR_ENV = "PLANNER_CALIBRATION_DIR"
DEFAULT_USER_DIR = "~/.cache/llm-planner/hardware"


def user_dir() -> Path:
    """The user's calibration folder: $PLANNER_CALIBRATION_DIR, else ~/.cache/llm-planner/hardware."""
    return Path(os.environ.get(USER_DIR_ENV) or DEFAULT_USER_DIR).expanduser()


def _env_dirs() -> list[Path]:
    raw = os.environ.get(ENV_VAR, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


def _profile_files(folder: Path, label: str) -> list[Path]:
    if not folder.is_dir():
        raise HardwareProfileError(
            f"{label} names {str(folder)!r}, which is not a folder;",
            hint=f"create it, or fix {label} (folders separated by {os.pathsep!r}).",
        )
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))


def _folders(extra_dirs: Iterable[str | os.PathLike[str]] | None) -> list[tuple[Path, str]]:
    folders = [(BUILTIN_DIR, "the built-in hardware_profiles folder")]
    user = user_dir()
    if user.is_dir():
        folders.append((user, USER_DIR_ENV))
    folders += [(d, ENV_VAR) for d in _env_dirs()]
    folders += [(Path(d).expanduser(), "extra_dirs") for d in (extra_dirs or ())]
    return folders


def _signature(folders: list[tuple[Path, str]]) -> tuple[tuple[str, str, int, int], ...]:
    """(folder, file, mtime, size) in load order, so an edited card is re-read and unchanged ones stay cached."""
    entries = []
    seen: set[str] = set()
    for folder, label in folders:
        resolved = str(folder.resolve())  # once per folder: resolve() walks every path component
        if resolved in seen:
            continue  # a folder named twice (built-ins in extra_dirs, say) is read once
        seen.add(resolved)
        for f in _profile_entries(folder, label):
            st = f.stat()
            entries.append((resolved, f.path, st.st_mtime_ns, st.st_size))
    return tuple(entries)


def _profile_entries(folder: Path, label: str) -> list[os.DirEntry[str]]:
    """``_profile_files`` as directory entries: one listing, one stat per file (the signature's hot path)."""
    try:
        with os.scandir(folder) as it:
            found = [
                e for e in it if e.name.endswith((".yaml", ".yml")) and e.name not in (".yaml", ".yml") and e.is_file()
            ]
    except (FileNotFoundError, NotADirectoryError):
        _profile_files(folder, label)  # raises the error that names the folder and the fix
        raise
    return sorted(found, key=lambda e: e.path)


@functools.lru_cache(maxsize=16)
def _load_registry(signature: tuple[tuple[str, str, int, int], ...]) -> _Registry:
    profiles: dict[str, HardwareProfile] = {}
    origins: dict[str, Path] = {}
    folders = dict.fromkeys(folder for folder, _, _, _ in signature)
    for folder in folders:
        seen_here: dict[str, Path] = {}
        for path in (Path(f) for d, f, _, _ in signature if d == folder):
            profile = read_profile(path)
            if _is_calibrated_file(path, profile) and not profile.id.endswith(CALIBRATED_SUFFIX):
                profile = profile.model_copy(update={"id": profile.id + CALIBRATED_SUFFIX})
            if profile.id in seen_here:
                raise HardwareProfileError(
                    f"{_display(path)}: id '{profile.id}' is also used by {_display(seen_here[profile.id])};",
                    hint="give each card in a folder its own id.",
                )
            seen_here[profile.id] = path
            profiles[profile.id] = profile  # a later folder overrides an earlier one
            origins[profile.id] = path
    aliases: dict[str, str] = {}
    for pid, profile in profiles.items():
        if pid.endswith(CALIBRATED_SUFFIX) and pid[: -len(CALIBRATED_SUFFIX)] in profiles:
            continue  # names of a calibrated card resolve to its base; calibrated_for() reaches it
        for alias in (*profile.aliases, *profile.device_names):
            aliases[_normalize(alias)] = pid
    return _Registry(profiles, origins, aliases)


def _registry(extra_dirs: Iterable[str | os.PathLike[str]] | None = None) -> _Registry:
    return _load_registry(_signature(_folders(extra_dirs)))


def load_profiles(extra_dirs: Iterable[str | os.PathLike[str]] | None = None) -> dict[str, HardwareProfile]:
    """All cards by id: built-ins, then each ``PLANNER_HARDWARE_DIR`` folder, then ``extra_dirs``.

    A later folder's card replaces an earlier one with the same id. A calibrated card (file
    ``<id>.calibrated.yaml`` or ``efficiency.kind: calibrated``) is listed as ``<id>-calibrated``
    next to its base card. Results are cached until a file changes. Raises HardwareProfileError
    for a bad file, naming the file, the key and the fix.
    """
    return dict(_registry(extra_dirs).profiles)


def profile_path(profile_id: str, extra_dirs: Iterable[str | os.PathLike[str]] | None = None) -> Path:
    """The YAML file a card was read from (to tell a user's override from a built-in)."""
    reg = _registry(extra_dirs)
    return reg.origins[_resolve_id(profile_id, reg)]


def _resolve_id(profile_id: str, reg: _Registry) -> str:
    key = _normalize(profile_id)
    if key in reg.profiles:
        return key
    if key in reg.aliases:
        return reg.aliases[key]
    known = sorted(reg.profiles)
    close = difflib.get_close_matches(key, known + sorted(reg.aliases), n=3)
    maybe = (
        "did you mean " + " or ".join(f"'{reg.aliases.get(c, c)}'" for c in dict.fromkeys(close)) + "? "
        if close
        else ""
    )
    raise HardwareProfileError(
        f"unknown GPU '{profile_id}'; known ids: {', '.join(known)}.",
        hint=f"{maybe}Pass one of them, or add a card YAML to a folder in {ENV_VAR} (see hardware_profiles/README.md).",
    )


def get_profile(profile_id: str, extra_dirs: Iterable[str | os.PathLike[str]] | None = None) -> HardwareProfile:
    """The card for an id, alias or device name, case-insensitive: 'H100', 'h100-sxm5', 'H100 SXM',
    'NVIDIA H100 80GB HBM3' all give ``h100-sxm``. Unknown names raise with the list of known ids."""
    reg = _registry(extra_dirs)
    return reg.profiles[_resolve_id(profile_id, reg)]


def calibrated_for(
    profile_id: str, extra_dirs: Iterable[str | os.PathLike[str]] | None = None
) -> HardwareProfile | None:
    """The calibrated variant of a card (``<id>-calibrated``), or None when none has been saved."""
    reg = _registry(extra_dirs)
    base = _resolve_id(profile_id, reg)
    if base.endswith(CALIBRATED_SUFFIX):
        return reg.profiles[base]
    return reg.profiles.get(base + CALIBRATED_SUFFIX)


_MATCH_MEMORY_TOLERANCE = 0.05
"""A name match is rejected when the reported memory is more than 5% off (a different SKU, or a MIG slice)."""


def match_profile(
    device_name: str,
    memory_bytes: int | None = None,
    extra_dirs: Iterable[str | os.PathLike[str]] | None = None,
) -> HardwareProfile | None:
    """The (uncalibrated) card whose ``device_names`` include ``device_name`` as torch/NVML report it.

    'NVIDIA H100 80GB HBM3' -> h100-sxm, 'NVIDIA A100-SXM4-80GB' -> a100-80gb, 'NVIDIA H200' -> h200.
    Exact names only, ignoring case, spacing and the vendor prefix: 'NVIDIA H20' never matches
    h200, and 'NVIDIA A100 80GB PCIe' (300 W, 1.94 TB/s) does not pass for the SXM card. When
    ``memory_bytes`` (CUDA or NVML total) is given and differs from the card's by more than 5%,
    there is no match. None when nothing fits; see :func:`profile_from_detected`.
    """
    reg = _registry(extra_dirs)
    key = _normalize(device_name)
    candidates = [
        p
        for p in reg.profiles.values()
        if not p.id.endswith(CALIBRATED_SUFFIX) and key in {_normalize(n) for n in p.device_names}
    ]
    if memory_bytes is not None:

        def off_by(p: HardwareProfile) -> float:
            totals = [t for t in (p.memory_bytes, p.memory_smi_bytes) if t is not None]
            return min(abs(memory_bytes - t) / t for t in totals)

        candidates = sorted((p for p in candidates if off_by(p) <= _MATCH_MEMORY_TOLERANCE), key=off_by)
    return candidates[0] if candidates else None


_SMI_RESERVE_BYTES = 512 * MiB
"""Typical gap between nvidia-smi's total and the CUDA total: 424-717 MiB on eight cards checked
(A100-40GB 424, A10G 441, H100 SXM 470, L40S 479, H100 PCIe 551, H20 586, H200 615, B200 728)."""


def profile_from_detected(
    name: str,
    memory_bytes: int,
    *,
    memory_is_cuda_total: bool = True,
    hbm_bandwidth_bytes_per_s: float | None = None,
    peak_flops_per_s: Mapping[str, float] | None = None,
    tdp_watts: float | None = None,
    gpus_per_node: int = 1,
    vendor: str | None = None,
    kind: Literal["gpu", "cpu"] = "gpu",
    calibration_info: Mapping[str, str] | None = None,
    efficiency: Efficiency | None = None,
) -> HardwareProfile:
    """A confidence-C card for a device no profile matches, labelled as detected.

    ``memory_bytes`` is the CUDA total (``torch.cuda.mem_get_info()[1]``); pass
    ``memory_is_cuda_total=False`` for an NVML/nvidia-smi total, and 512 MiB is subtracted as an
    estimate. Bandwidth and FLOP/s stay None (unknown) unless measured values are passed: the
    Validate micro-benchmarks supply them.
    """
    if memory_bytes <= 0:
        raise HardwareProfileError(
            f"detected memory for {name!r} is {memory_bytes} bytes;", hint="pass the device total in bytes (> 0)."
        )
    smi_bytes = None if memory_is_cuda_total else memory_bytes
    cuda_bytes = memory_bytes if memory_is_cuda_total else max(memory_bytes - _SMI_RESERVE_BYTES, 1)
    slug = re.sub(r"[^a-z0-9.]+", "-", _normalize(name)).strip("-") or "device"
    lowered = name.lower()
    guessed_vendor = vendor or next(
        (
            v
            for k, v in (("nvidia", "NVIDIA"), ("geforce", "NVIDIA"), ("amd", "AMD"), ("gaudi", "Intel"))
            if k in lowered
        ),
        "unknown",
    )
    flops = {math_dtype(k): float(v) for k, v in (peak_flops_per_s or {}).items()}
    measured = "measured on this machine" if (hbm_bandwidth_bytes_per_s or flops) else "unknown until measured"
    memory_note = (
        "memory_bytes as the CUDA runtime reported it"
        if memory_is_cuda_total
        else f"memory_bytes = NVML total - 512 MiB (estimate of the driver reservation), {cuda_bytes / GiB:.2f} GiB"
    )
    return HardwareProfile(
        id=f"detected-{slug}",
        name=f"{name} (detected)",
        vendor=guessed_vendor,
        kind=kind,
        memory_bytes=cuda_bytes,
        memory_bytes_estimated=not memory_is_cuda_total,
        memory_smi_bytes=smi_bytes,
        hbm_bandwidth_bytes_per_s=hbm_bandwidth_bytes_per_s,
        peak_flops_per_s=flops,
        interconnect_kind=None,
        gpus_per_node=gpus_per_node,
        tdp_watts=tdp_watts,
        sources={"memory_bytes": "detected on this machine"},
        confidence="C",
        notes=(
            f"No built-in profile matches the device name {name!r}. {memory_note}; bandwidth and FLOP/s "
            f"{measured}. Add a card YAML (hardware_profiles/README.md) for datasheet numbers."
        ),
        efficiency=efficiency,
        calibration_info=dict(calibration_info) if calibration_info is not None else None,
    )


def save_profile(profile: HardwareProfile, folder: str | os.PathLike[str]) -> Path:
    """Write ``<folder>/<id>.yaml`` (yaml.safe_dump, fields in schema order) and return its path.

    Point ``PLANNER_HARDWARE_DIR`` at ``folder`` and :func:`load_profiles` picks it up; a card
    with ``efficiency.kind: calibrated`` appears as ``<id>-calibrated``.
    """
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{profile.id}.yaml"
    data = profile.model_dump(mode="json")
    header = (
        f"# {profile.name}: hardware profile written by planner.hardware.save_profile.\n"
        f"# Units are in the key names (bytes, bytes/s, FLOP/s, watts); FLOP/s are dense. "
        f"See hardware_profiles/README.md.\n"
    )
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100), encoding="utf-8")
    tmp.replace(path)
    return path


# ------------------------------------------------------------------------------------------------
# Prices the user sets: $/GPU-hour per card, over the profiles' cited on-demand figure.
# ------------------------------------------------------------------------------------------------

PRICE_SET_BY_USER = "set by the user"
"""``sources['price_per_hour_usd']`` of a profile whose price the user gave (:func:`with_price`)."""


def check_price(usd_per_gpu_hour: object, card: str, key: str = "price_per_hour_usd") -> float:
    """``usd_per_gpu_hour`` as a float when it is a positive, finite number of US dollars per GPU-hour;
    else HardwareProfileError naming ``key`` (the flag or field the user filled), the card and the value."""
    if (
        not isinstance(usd_per_gpu_hour, (int, float))
        or isinstance(usd_per_gpu_hour, bool)
        or not math.isfinite(usd_per_gpu_hour)
        or usd_per_gpu_hour <= 0
    ):
        raise HardwareProfileError(
            f"{key}: the price of {card} must be a finite number > 0 of US dollars per GPU-hour, got "
            f"{usd_per_gpu_hour!r}.",
            hint="Give the on-demand price of one GPU for one hour, e.g. 3.5 for $3.50.",
        )
    return float(usd_per_gpu_hour)


def resolve_prices(
    prices: Mapping[str, object] | None,
    key: str = "prices",
    profiles: Mapping[str, HardwareProfile] | None = None,
) -> dict[str, float]:
    """{profile id: US dollars per GPU-hour} from the card names a user typed (id, alias or device
    name, any case; ``profiles`` first, then the registry). An unknown card, a bad price, or one card
    priced twice at different prices raises HardwareProfileError naming ``key``."""
    out: dict[str, float] = {}
    for name, value in (prices or {}).items():
        card = _normalize(name)
        if profiles and card in profiles:
            pid = card
        else:
            try:
                pid = get_profile(name).id
            except HardwareProfileError as err:
                raise HardwareProfileError(f"{key}: {err.message}", hint=err.hint) from None
        price = check_price(value, pid, key)
        if pid in out and out[pid] != price:
            raise HardwareProfileError(
                f"{key}: {pid} is priced twice (${out[pid]:g} and ${price:g} per GPU-hour; '{name}' names the same "
                f"card).",
                hint="Give each card one price.",
            )
        out[pid] = price
    return out


def with_price(profile: HardwareProfile, usd_per_gpu_hour: float, source: str = PRICE_SET_BY_USER) -> HardwareProfile:
    """A copy of ``profile`` at ``usd_per_gpu_hour`` US dollars per GPU-hour, ``sources`` saying where it came from."""
    price = check_price(usd_per_gpu_hour, profile.id)
    return profile.model_copy(
        update={"price_per_hour_usd": price, "sources": {**profile.sources, "price_per_hour_usd": source}}
    )


def priced(profile: HardwareProfile, prices: Mapping[str, float] | None) -> HardwareProfile:
    """``profile`` at the user's price for its id (or its base card's, for ``<id>-calibrated``); unchanged
    when ``prices`` names neither. ``prices`` is what :func:`resolve_prices` returns."""
    if not prices:
        return profile
    base = profile.id.removesuffix(CALIBRATED_SUFFIX)
    price = prices.get(profile.id, prices.get(base))
    return profile if price is None else with_price(profile, price)
