"""Export: this plan as deployment files, one set tuned for latency and one for throughput."""

import streamlit as st

from ui.derived import artefacts_zip
from ui.errors import shown_errors
from ui.format import fmt_rate, fmt_seconds, kind_badge
from ui.state import current_inputs
from ui.sweeps import deployment_bundle

LANGUAGE = {"vllm-yaml": "yaml", "k8s": "yaml", "vllm-cmd": "bash", "sglang": "bash", "bench": "bash"}
TARGET_TITLE = {
    "vllm-yaml": "vLLM config (YAML)",
    "vllm-cmd": "vllm serve command",
    "sglang": "SGLang launch",
    "k8s": "Kubernetes manifest",
    "bench": "Benchmark command",
}

st.title("Export")
inputs = current_inputs()
model, hw, sc = inputs.model, inputs.hardware, inputs.scenario

with shown_errors():
    bundle = deployment_bundle(model, hw, sc, inputs.loaded, inputs.draft)
dep = bundle.deployment

layout = f"{dep.replicas} replica(s) x {dep.gpus_per_replica} GPU(s) (TP {dep.tp} x PP {dep.pp}) of {dep.gpu_name}"
if dep.multi_node:
    layout += (
        f"; each replica spans {dep.nodes_per_replica} nodes: vLLM on Ray, tensor parallel within a node, "
        "pipeline parallel across nodes, deployed as a Kubernetes LeaderWorkerSet"
    )
st.caption(
    f"{dep.model} · {layout} · image {dep.image} · each pod requests {dep.cpu_request} CPU cores and "
    f"{dep.memory_request_gib} GiB of host memory. Each file carries the planner's expected metrics as comments, "
    "in the form the engines' own parsers accept (tested with vLLM 0.33.0, SGLang 0.5.23, kubernetes-validate 1.37). "
    "No file holds your Hugging Face token: they read it from HF_TOKEN or a Kubernetes Secret."
)
for warning in bundle.warnings:
    st.warning(warning, icon=":material/warning:")

st.download_button(
    "Download all files (zip)",
    artefacts_zip(bundle),
    file_name=f"{dep.app_name}-deploy.zip",
    mime="application/zip",
    key="export_zip",
    on_click="ignore",
    icon=":material/folder_zip:",
    type="primary",
)

for tab, profile in zip(st.tabs([f"{p.profile.capitalize()} profile" for p in bundle.profiles]), bundle.profiles):
    with tab:
        lat = profile.latency
        st.markdown(f"**{profile.purpose}.** {profile.rule}.")
        kind_badge(lat.kind)
        cols = st.columns(5)
        cols[0].metric("max-num-seqs", f"{profile.max_num_seqs:,}")
        cols[1].metric("batched tokens", f"{profile.max_num_batched_tokens:,}", help="vLLM's --max-num-batched-tokens.")
        cols[2].metric("TTFT", fmt_seconds(lat.ttft_seconds))
        cols[3].metric("TPOT", fmt_seconds(lat.tpot_seconds))
        cols[4].metric("Output tokens/s", fmt_rate(lat.throughput_tokens_per_s, unit=""))
        if not profile.plan.fits:
            st.error(
                f"This profile {profile.plan.reason}"
                if profile.plan.reason.startswith("does not start")
                else f"This profile does not start: {profile.plan.reason}",
                icon=":material/block:",
            )
        for artefact in [a for a in bundle.artefacts if a.profile == profile.profile]:
            left, right = st.columns([2, 1.4], vertical_alignment="center")
            left.markdown(
                f"**{TARGET_TITLE.get(artefact.target, artefact.target)}** · `{artefact.filename}` · "
                f"{artefact.description}"
            )
            right.download_button(
                f"Download {artefact.filename}",
                artefact.text.encode(),
                file_name=artefact.filename,
                mime="text/yaml" if LANGUAGE.get(artefact.target) == "yaml" else "text/x-shellscript",
                key=f"export_{profile.profile}_{artefact.target}",
                on_click="ignore",
                icon=":material/download:",
            )
            with st.expander(f"Show {artefact.filename}"):
                st.code(artefact.text, language=LANGUAGE.get(artefact.target))
