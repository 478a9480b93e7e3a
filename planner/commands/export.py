"""``export``: the plan as vLLM / SGLang / Kubernetes configs and a bench command (planner.deploy.export)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from planner.commands.common import (
    add_disagg_flags,
    add_efficiency_flag,
    add_model_argument,
    add_scenario_flags,
    add_speculative_flags,
    disagg_layout_from_args,
    efficiency_from_args,
    field_descriptions,
    hardware_from_args,
    load_draft_model,
    load_model,
    scenario_from_args,
    to_jsonable,
)
from planner.deploy.export import (
    PD_TARGETS,
    PROFILES,
    TARGETS,
    VLLM_IMAGES,
    ExportBundle,
    export_bundle,
    pd_bundle,
)
from planner.errors import ScenarioError

NAME = "export"
HELP = (
    "Export deployment configs for a latency or a throughput profile: vLLM --config YAML, vllm serve command, "
    "SGLang (sglang serve) command, Kubernetes manifest, vllm bench serve command. A combination vLLM refuses "
    "(e.g. --kv-cache-dtype int8) is refused with vLLM's reason."
)
EXAMPLE = (
    "python -m planner export meta-llama/Llama-3.1-8B --max-model-len 8192 --profile latency "
    "--target vllm-yaml > vllm.yaml"
)

OUTPUT_KEYS = {
    **field_descriptions(ExportBundle),
    "written": "Files written with --output-dir (empty otherwise).",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    out = parser.add_argument_group("export")
    out.add_argument(
        "--profile",
        choices=(*PROFILES, "both"),
        default="latency",
        help="latency (online: small max-num-seqs, small step budget) or throughput (offline: as many "
        "sequences as the KV cache holds, large step budget), or both. Default: %(default)s.",
    )
    out.add_argument(
        "--target",
        choices=(*TARGETS, "all"),
        default="vllm-yaml",
        help="vllm-yaml (vllm serve --config file), vllm-cmd, sglang, k8s (Deployment or, across nodes, "
        "LeaderWorkerSet), bench (vllm bench serve), or all. Default: %(default)s.",
    )
    out.add_argument(
        "--output-dir",
        metavar="DIR",
        default=None,
        help="Write the files into DIR (created if needed) instead of printing them.",
    )
    out.add_argument(
        "--image",
        default=None,
        help="Container image for the Kubernetes manifest. Default: vLLM's image for the card's vendor ("
        + ", ".join(f"{k}: {v}" for k, v in VLLM_IMAGES.items())
        + "); Intel Gaudi needs one given.",
    )
    add_scenario_flags(parser)
    add_disagg_flags(
        parser,
        "write a prefill and a decode pool instead (vllm-yaml, vllm-cmd, k8s per pool with NixlConnector; sglang "
        "per pool with --disaggregation-mode, and its router)",
    )
    add_speculative_flags(parser)
    add_efficiency_flag(parser)


def _pd_bundle(args: argparse.Namespace, spec, loaded, sc, hw, layout) -> ExportBundle:
    """The two pools' files; only the targets a disaggregated export writes, and the pools' figures as a pointer."""
    asked = set(PD_TARGETS if args.target == "all" else (args.target,))
    if not asked <= set(PD_TARGETS):
        raise ScenarioError(
            f"--target {args.target} is not written for disaggregated prefill/decode (--prefill-instances).",
            hint=f"Use --target {', '.join(PD_TARGETS)} or all.",
        )
    pointer = (
        f"The pools' latencies: python -m planner simulate {spec.name} --gpu {hw.id} --qps R "
        f"--prefill-instances {layout.prefill_instances} --prefill-tp {layout.prefill_tp} "
        f"--decode-instances {layout.decode_instances} --decode-tp {layout.decode_tp} "
        f"--kv-transfer-link {layout.kv_transfer_link}"
    )
    return pd_bundle(
        spec,
        hw,
        sc,
        prefill_instances=layout.prefill_instances,
        prefill_tp=layout.prefill_tp,
        decode_instances=layout.decode_instances,
        decode_tp=layout.decode_tp,
        kv_transfer_link=layout.kv_transfer_link,
        expected=[pointer],
        loaded=loaded,
        revision=args.revision,
        image=args.image,
        efficiency=efficiency_from_args(args, hw),
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec, loaded = load_model(args)
    sc = scenario_from_args(args)
    hw = hardware_from_args(args)
    profiles = PROFILES if args.profile == "both" else (args.profile,)
    targets = TARGETS if args.target == "all" else (args.target,)
    layout = disagg_layout_from_args(args)
    if layout is not None:
        bundle = _pd_bundle(args, spec, loaded, sc, hw, layout)
        return _written(args, bundle, [a for a in bundle.artefacts if a.target in targets])
    bundle = export_bundle(
        spec,
        hw,
        sc,
        loaded=loaded,
        revision=args.revision,
        image=args.image,
        efficiency=efficiency_from_args(args, hw),
        profiles=profiles,
        draft_model=load_draft_model(args),
    )
    return _written(args, bundle, [a for a in bundle.artefacts if a.target in targets])


def _written(args: argparse.Namespace, bundle: ExportBundle, chosen: list) -> dict[str, Any]:
    """The chosen files printed, or written to --output-dir."""
    written = []
    if args.output_dir:
        folder = Path(args.output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for artefact in chosen:
            path = folder / artefact.filename
            path.write_text(artefact.text, encoding="utf-8")
            if path.suffix == ".sh":
                path.chmod(0o755)
            written.append(str(path))
    return {**to_jsonable(bundle.model_copy(update={"artefacts": chosen})), "written": written}


def render_table(result: dict[str, Any]) -> str:
    """The files themselves (so `export ... > file` works), or where they were written."""
    if result["written"]:
        return "\n".join(f"wrote {path}" for path in result["written"])
    artefacts = result["artefacts"]
    if len(artefacts) == 1:
        return artefacts[0]["text"].rstrip("\n")
    return "\n\n".join(f"==> {a['filename']} <==\n{a['text'].rstrip()}" for a in artefacts)
