"""Deployment export: flag names checked against the engines' own argument lists, the YAML and the
command line agreeing, Kubernetes manifests (single node and LeaderWorkerSet across nodes), the
two profiles differing as intended, and no token anywhere.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from planner.deploy.export import ExportBundle, export_bundle
from planner.estimate.latency import estimate_latency
from planner.estimate.operating_points import LATENCY_TPOT_SLACK
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario

# vLLM flags as `vllm serve` defines them, typed here by hand from the source so the test does not
# trust the module it checks: vllm-project/vllm vllm/engine/arg_utils.py, EngineArgs.add_cli_args, at
# commit 99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b (model, parallel, cache, scheduler groups), plus
# host and port from the config example in docs/configuration/serve_args.md.
VLLM_SERVE_FLAGS = {
    "model",
    "tokenizer",
    "revision",
    "dtype",
    "seed",
    "max-model-len",
    "quantization",
    "enforce-eager",
    "served-model-name",
    "trust-remote-code",
    "disable-sliding-window",
    "load-format",
    "download-dir",
    "distributed-executor-backend",
    "pipeline-parallel-size",
    "tensor-parallel-size",
    "data-parallel-size",
    "enable-expert-parallel",
    "max-parallel-loading-workers",
    "disable-custom-all-reduce",
    "block-size",
    "gpu-memory-utilization",
    "kv-cache-memory-bytes",
    "swap-space",
    "kv-cache-dtype",
    "num-gpu-blocks-override",
    "enable-prefix-caching",
    "cpu-offload-gb",
    "calculate-kv-scales",
    "max-num-batched-tokens",
    "max-num-seqs",
    "max-num-partial-prefills",
    "long-prefill-token-threshold",
    "scheduling-policy",
    "enable-chunked-prefill",
    "async-scheduling",
    "max-cudagraph-capture-size",
    "host",
    "port",
    # The negative form argparse's BooleanOptionalAction adds; a --config file must spell a false
    # boolean this way (vllm/utils/argparse_utils.py load_config_file looks "--no-<flag>" up on the
    # top-level parser, which lacks serve's flags, and drops "flag: false").
    "no-enable-chunked-prefill",
}
# Value choices: ModelDType (vllm/config/model.py), the 16-bit and fp8 members of vLLM 0.33.0's CacheDType
# (vllm/config/cache.py; no plain int8 there), DistributedExecutorBackend, BlockSize.
VLLM_CHOICES = {
    "dtype": {"auto", "half", "float16", "bfloat16", "float", "float32"},
    "kv-cache-dtype": {"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"},
    "distributed-executor-backend": {"ray", "mp", "uni", "external_launcher"},
    "block-size": {1, 8, 16, 32, 64, 128, 256},
}
# `sglang serve` flags, typed from the sglang 0.5.23 wheel (sglang/srt/arg_groups/fields/*.py): the
# current names only (--disable-cuda-graph is deprecated there for --cuda-graph-backend-{decode,prefill}).
SGLANG_FLAGS = {
    "model-path",
    "tokenizer-path",
    "revision",
    "host",
    "port",
    "dtype",
    "quantization",
    "kv-cache-dtype",
    "context-length",
    "mem-fraction-static",
    "max-running-requests",
    "max-total-tokens",
    "chunked-prefill-size",
    "max-prefill-tokens",
    "page-size",
    "tp-size",
    "tensor-parallel-size",
    "pp-size",
    "pipeline-parallel-size",
    "nnodes",
    "node-rank",
    "dist-init-addr",
    "cuda-graph-backend-decode",
    "cuda-graph-backend-prefill",
    "trust-remote-code",
}
SGLANG_KV_CHOICES = {"auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16"}
# `vllm bench serve`: vllm-project/vllm vllm/benchmarks/serve.py add_cli_args at commit
# def9ce85ba1079af970a58ed3d42dd861ae35d58, and vllm/benchmarks/datasets.py add_dataset_parser.
BENCH_FLAGS = {
    "backend",
    "base-url",
    "host",
    "port",
    "endpoint",
    "model",
    "tokenizer",
    "max-concurrency",
    "request-rate",
    "input-len",
    "output-len",
    "dataset-name",
    "num-prompts",
    "random-input-len",
    "random-output-len",
    "seed",
    "ignore-eos",
    "percentile-metrics",
    "metric-percentiles",
    "save-result",
    "result-dir",
    "result-filename",
    "metadata",
    "num-warmups",
}

SECRET = "hf_ExportSecretToken0123456789"


def spec_of(name: str):
    loaded = load_config(name)
    return build_spec(loaded.config, loaded.name), loaded


def bundle(name: str, **scenario) -> ExportBundle:
    spec, loaded = spec_of(name)
    sc = Scenario(**scenario)
    return export_bundle(spec, get_profile(sc.gpu), sc, loaded=loaded)


CASES = {
    "8b-one-h100": ("meta-llama/Llama-3.1-8B", {"max_model_len": 8192}),
    "70b-tp4-fp8kv-eager": (
        "meta-llama/Llama-3.1-70B",
        {"tp": 4, "kv_cache_dtype": "fp8", "engine": "eager", "max_model_len": 16384},
    ),
    "qwen-moe-fp8-weights": ("Qwen/Qwen3-30B-A3B", {"tp": 2, "weight_dtype": "fp8", "max_model_len": 32768}),
    "awq-checkpoint-l40s": ("Qwen/Qwen3-4B-AWQ", {"gpu": "l40s", "block_size": 32}),
    "deepseek-two-nodes": (
        "deepseek-ai/DeepSeek-V3",
        {"tp": 8, "pp": 2, "max_model_len": 32768, "kv_cache_dtype": "fp8"},
    ),
    "no-chunked-prefill": ("Qwen/Qwen2.5-7B", {"gpu": "l40s", "enable_chunked_prefill": False, "max_model_len": 8192}),
    "two-replicas": ("meta-llama/Llama-3.1-8B", {"num_gpus": 4, "tp": 2, "max_model_len": 8192}),
}


@pytest.fixture(scope="module")
def bundles() -> dict[str, ExportBundle]:
    return {key: bundle(name, **sc) for key, (name, sc) in CASES.items()}


def body(text: str) -> str:
    """The file without its leading comment lines (and shebang)."""
    lines = text.splitlines()
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "\n".join(lines)


def command_words(text: str) -> list[str]:
    return shlex.split(body(text).replace("\\\n", " "))


def parse_flags(words: list[str]) -> dict[str, object]:
    """['--a', '1', '--b', '--no-c'] -> {'a': '1', 'b': True, 'c': False}; --metadata keeps all its values."""
    flags: dict[str, object] = {}
    i = 0
    while i < len(words):
        word = words[i]
        assert word.startswith("--"), f"stray word {word!r}"
        name = word[2:]
        values = []
        while i + 1 < len(words) and not words[i + 1].startswith("--"):
            values.append(words[i + 1])
            i += 1
        if values:
            flags[name] = values[0] if len(values) == 1 else values
        elif name.startswith("no-"):
            flags[name[3:]] = False
        else:
            flags[name] = True
        i += 1
    return flags


def as_cli(value: object) -> object:
    return value if isinstance(value, bool) else str(value)


def config_as_flags(config: dict) -> dict:
    """A vllm --config mapping as the flags it becomes: 'no-x: true' is x False (as parse_flags reads --no-x)."""
    out = {}
    for key, value in config.items():
        if key.startswith("no-") and value is True:
            out[key[3:]] = False
        else:
            out[key] = as_cli(value)
    return out


# ----------------------------------------------------------------------------- vLLM YAML


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("profile", ["latency", "throughput"])
def test_vllm_yaml_keys_are_vllm_flags(bundles, case, profile):
    text = bundles[case].artefact(profile, "vllm-yaml").text
    assert text.startswith("# ")
    config = yaml.safe_load(text)
    assert set(config) <= VLLM_SERVE_FLAGS, set(config) - VLLM_SERVE_FLAGS
    for key, allowed in VLLM_CHOICES.items():
        if key in config:
            assert config[key] in allowed, (key, config[key])
    comments = text[: text.index(body(text))]
    for label in ("TTFT", "TPOT", "output tokens/s", "KV cache", "starts:"):
        assert label in comments
    assert "[estimate]" in comments


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("profile", ["latency", "throughput"])
def test_command_line_matches_the_yaml(bundles, case, profile):
    b = bundles[case]
    config = yaml.safe_load(b.artefact(profile, "vllm-yaml").text)
    words = command_words(b.artefact(profile, "vllm-cmd").text)
    assert words[:2] == ["vllm", "serve"]
    flags = parse_flags(words[3:])
    assert {"model": words[2], **flags} == config_as_flags(config)


def test_yaml_values_follow_the_scenario(bundles):
    c = yaml.safe_load(bundles["70b-tp4-fp8kv-eager"].artefact("latency", "vllm-yaml").text)
    assert c["model"] == "meta-llama/Llama-3.1-70B"
    assert (c["tensor-parallel-size"], c["pipeline-parallel-size"]) == (4, 1)
    assert c["kv-cache-dtype"] == "fp8" and c["enforce-eager"] is True and c["max-model-len"] == 16384
    assert c["distributed-executor-backend"] == "mp" and c["gpu-memory-utilization"] == 0.92
    assert c["dtype"] == "bfloat16"
    q = yaml.safe_load(bundles["qwen-moe-fp8-weights"].artefact("throughput", "vllm-yaml").text)
    assert q["quantization"] == "fp8"
    awq = bundles["awq-checkpoint-l40s"]
    a = yaml.safe_load(awq.artefact("latency", "vllm-yaml").text)
    assert "quantization" not in a and a["block-size"] == 32  # read from the checkpoint; block size as given
    assert any("awq-quantized" in w for w in awq.warnings)
    one = yaml.safe_load(bundles["8b-one-h100"].artefact("latency", "vllm-yaml").text)
    assert "distributed-executor-backend" not in one and "enforce-eager" not in one


def test_without_chunked_prefill_the_budget_covers_max_model_len(bundles):
    b = bundles["no-chunked-prefill"]
    for profile in ("latency", "throughput"):
        c = yaml.safe_load(b.artefact(profile, "vllm-yaml").text)
        # What vLLM's config loader honours: "enable-chunked-prefill: false" would be dropped silently.
        assert c["no-enable-chunked-prefill"] is True and "enable-chunked-prefill" not in c
        assert c["max-num-batched-tokens"] >= c["max-model-len"]
        assert "--no-enable-chunked-prefill" in command_words(b.artefact(profile, "vllm-cmd").text)
        sg = parse_flags(command_words(b.artefact(profile, "sglang").text)[2:])
        assert sg["chunked-prefill-size"] == "-1"


# ------------------------------------------------------------------------------ profiles


def test_latency_and_throughput_profiles_differ_as_intended(bundles):
    b = bundles["8b-one-h100"]
    lat, thr = b.profile("latency"), b.profile("throughput")
    assert lat.max_num_seqs < thr.max_num_seqs
    assert lat.max_num_batched_tokens < thr.max_num_batched_tokens
    assert lat.latency.tpot_seconds < thr.latency.tpot_seconds
    assert lat.latency.throughput_tokens_per_s < thr.latency.throughput_tokens_per_s
    # Throughput: as many sequences as the KV cache holds at the workload's lengths (<= vLLM's cap).
    per_request = thr.scenario.workload.input_len + thr.scenario.workload.output_len
    assert thr.max_num_seqs == min(1024, thr.plan.kv_cache_tokens // per_request)  # its own plan's fit, exactly
    # Latency: TPOT within the slack of batch 1, and the next power of two breaks it (or the cap binds).
    spec, _ = spec_of("meta-llama/Llama-3.1-8B")
    hw = get_profile("h100-sxm")

    def tpot(batch: int) -> float:
        return estimate_latency(spec, hw, lat.scenario, batch_size=batch, check_memory=False).tpot_seconds

    assert tpot(lat.max_num_seqs) <= LATENCY_TPOT_SLACK * tpot(1)
    assert tpot(2 * lat.max_num_seqs) > LATENCY_TPOT_SLACK * tpot(1)


def test_user_limits_win_over_both_profiles():
    b = bundle("meta-llama/Llama-3.1-8B", max_model_len=8192, max_num_seqs=12, max_num_batched_tokens=4096)
    for profile in ("latency", "throughput"):
        c = yaml.safe_load(b.artefact(profile, "vllm-yaml").text)
        assert (c["max-num-seqs"], c["max-num-batched-tokens"]) == (12, 4096)


def test_a_plan_that_does_not_fit_still_exports_with_a_warning():
    b = bundle("meta-llama/Llama-3.1-70B", gpu="l4")
    text = b.artefact("latency", "vllm-yaml").text
    assert "does NOT start" in text and "starts: NO" in text
    assert yaml.safe_load(text)["max-num-seqs"] >= 1


# ---------------------------------------------------------------------------- Kubernetes


def test_k8s_single_node_deployment(bundles):
    b = bundles["70b-tp4-fp8kv-eager"]
    text = b.artefact("latency", "k8s").text
    assert "&id" not in text and "*id" not in text  # no YAML anchors
    deploy, service = yaml.safe_load_all(text)
    assert (deploy["apiVersion"], deploy["kind"], service["kind"]) == ("apps/v1", "Deployment", "Service")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 4
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    (env,) = container["env"]
    assert env["name"] == "HF_TOKEN" and env["valueFrom"]["secretKeyRef"]["name"] == "hf-token" and "value" not in env
    config = yaml.safe_load(b.artefact("latency", "vllm-yaml").text)
    assert container["command"] == ["vllm", "serve"]
    assert {"model": container["args"][0], **parse_flags(container["args"][1:])} == config_as_flags(config)
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    requests = container["resources"]["requests"]
    dep = b.deployment
    assert requests["cpu"] == str(dep.tp + 2)  # a core per GPU worker, two for the API server and engine core
    weights_gib = b.profile("latency").plan.weight_bytes_per_gpu * 4 / 2**30
    assert weights_gib + 16 + 8 <= int(requests["memory"].removesuffix("Gi")) < weights_gib + 16 + 8 + 1
    replicas = yaml.safe_load_all(bundles["two-replicas"].artefact("throughput", "k8s").text)
    assert next(replicas)["spec"]["replicas"] == 2


def test_multi_node_is_ray_and_a_leaderworkerset(bundles):
    b = bundles["deepseek-two-nodes"]
    dep = b.deployment
    assert dep.multi_node and (dep.nodes_per_replica, dep.gpus_per_pod) == (2, 8)
    config = yaml.safe_load(b.artefact("throughput", "vllm-yaml").text)
    assert config["distributed-executor-backend"] == "ray"
    assert (config["tensor-parallel-size"], config["pipeline-parallel-size"]) == (8, 2)  # TP in a node, PP across
    lws, service = yaml.safe_load_all(b.artefact("throughput", "k8s").text)
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    for container in (leader, worker):
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert container["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    script = leader["args"][0]
    assert script.startswith("ray start --head") and "LWS_GROUP_SIZE" in script
    assert "--distributed-executor-backend ray" in script and "vllm serve deepseek-ai/DeepSeek-V3" in script
    assert "$LWS_LEADER_ADDRESS" in worker["args"][0] and "--block" in worker["args"][0]
    assert leader["readinessProbe"]["httpGet"]["path"] == "/health"
    assert service["spec"]["selector"]["role"] == "leader"
    # The LWS controller names its headless Service (the workers' DNS domain) after the LWS and skips
    # creating it when a Service of that name exists: ours must have another name.
    assert service["metadata"]["name"] != lws["metadata"]["name"]
    assert template["leaderTemplate"]["metadata"]["labels"]["role"] == "leader"
    assert worker["args"][0].startswith("i=0; until ray start") and "exit 1" in worker["args"][0]  # retried, bounded
    assert "exit 1" in script  # the head's wait for its workers is bounded too
    for container in (leader, worker):
        assert {"cpu", "memory", "nvidia.com/gpu"} <= set(container["resources"]["requests"])
    sg = parse_flags(command_words(b.artefact("throughput", "sglang").text)[2:])
    assert sg["nnodes"] == "2" and sg["node-rank"] == "$NODE_RANK"


def test_tensor_parallel_across_nodes_is_warned():
    b = bundle("deepseek-ai/DeepSeek-V3", tp=16, max_model_len=8192)
    assert b.deployment.multi_node
    assert any("spans nodes" in w and "--tp 8 --pp 2" in w for w in b.warnings)


# ------------------------------------------------------------------------ SGLang, bench


@pytest.mark.parametrize("case", CASES)
def test_sglang_flags_are_sglang_flags(bundles, case):
    for profile in ("latency", "throughput"):
        b = bundles[case]
        words = command_words(b.artefact(profile, "sglang").text)
        assert words[:2] == ["sglang", "serve"]  # python -m sglang.launch_server is the legacy entrypoint
        flags = parse_flags(words[2:])
        assert set(flags) <= SGLANG_FLAGS, set(flags) - SGLANG_FLAGS
        assert flags.get("kv-cache-dtype", "auto") in SGLANG_KV_CHOICES
        prof = b.profile(profile)
        assert flags["max-running-requests"] == str(prof.max_num_seqs)
        assert flags["tp-size"] == str(prof.scenario.tp) and flags["context-length"] == str(
            prof.plan.resolved.max_model_len
        )
        assert 0 < float(flags["mem-fraction-static"]) <= 1


@pytest.mark.parametrize("case", CASES)
def test_bench_command_measures_the_profile(bundles, case):
    for profile in ("latency", "throughput"):
        b = bundles[case]
        words = command_words(b.artefact(profile, "bench").text)
        assert words[:3] == ["vllm", "bench", "serve"]
        flags = parse_flags(words[3:])
        assert set(flags) <= BENCH_FLAGS, set(flags) - BENCH_FLAGS
        prof = b.profile(profile)
        assert flags["max-concurrency"] == str(prof.max_num_seqs)
        assert flags["random-input-len"] == str(prof.scenario.workload.input_len)
        metadata = dict(item.split("=", 1) for item in flags["metadata"])
        assert metadata["planner_profile"] == profile and metadata["planner_kind"] == prof.latency.kind
        assert float(metadata["planner_tpot_ms"]) == pytest.approx(prof.latency.tpot_seconds * 1e3, rel=1e-3)


# ------------------------------------------------------------------------- the token etc.


def test_no_token_in_any_export(monkeypatch, tmp_path, capsys):
    from planner.cli import main

    monkeypatch.setenv("HF_TOKEN", SECRET)
    b = bundle("meta-llama/Llama-3.1-8B", max_model_len=8192)
    assert SECRET not in b.model_dump_json()
    out_dir = tmp_path / "out"
    code = main(
        [
            "export",
            "llama3.1-8b",
            "--hf-token",
            SECRET,
            "--profile",
            "both",
            "--target",
            "all",
            "--output-dir",
            str(out_dir),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert SECRET not in out + err
    files = sorted(p.name for p in out_dir.iterdir())
    assert len(files) == 10
    for path in out_dir.iterdir():
        text = path.read_text()
        assert SECRET not in text
        assert "hf_" not in text.replace("hf-cache", "").replace("hf-token", "")


def test_local_config_serves_its_folder(tmp_path):
    folder = tmp_path / "weights"
    folder.mkdir()
    catalog = Path(__file__).resolve().parent.parent / "planner" / "model" / "catalog"
    (folder / "config.json").write_text((catalog / "Qwen--Qwen2.5-7B.json").read_text())
    loaded = load_config(str(folder / "config.json"))
    spec = build_spec(loaded.config, loaded.name)
    b = export_bundle(spec, get_profile("h100-sxm"), Scenario(max_model_len=4096), loaded=loaded)
    assert yaml.safe_load(b.artefact("latency", "vllm-yaml").text)["model"] == str(folder.resolve())
    assert any("local file" in w for w in b.warnings)
    # In the cluster the folder of the planner's machine does not exist: it is mounted from a claim.
    deploy = next(yaml.safe_load_all(b.artefact("latency", "k8s").text))
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][0] == "/models/served" and str(folder) not in container["args"]
    assert {"name": "model", "mountPath": "/models/served", "readOnly": True} in container["volumeMounts"]
    (claim,) = [v for v in pod["volumes"] if v["name"] == "model"]
    assert claim["persistentVolumeClaim"]["claimName"] == f"{b.deployment.app_name}-model"


def test_bundle_round_trips_as_json(bundles):
    b = bundles["deepseek-two-nodes"]
    again = ExportBundle.model_validate(json.loads(b.model_dump_json()))
    assert again == b
    assert {(a.profile, a.target) for a in b.artefacts} == {
        (p, t) for p in ("latency", "throughput") for t in ("vllm-yaml", "vllm-cmd", "sglang", "k8s", "bench")
    }


# -------------------------------------------------- what the engines refuse, and what they run


@pytest.mark.parametrize(
    "name, scenario",
    [
        ("mistralai/Mixtral-8x7B-v0.1", {"tp": 2, "max_model_len": 8192}),
        ("Qwen/Qwen3-30B-A3B", {"max_model_len": 8192}),
        ("ai21labs/AI21-Jamba-1.5-Mini", {"tp": 2, "max_model_len": 8192}),
        ("deepseek-ai/DeepSeek-V3", {"gpu": "h200", "tp": 8, "max_model_len": 8192, "kv_cache_dtype": "fp8"}),
    ],
)
def test_latency_profile_takes_concurrent_requests(name, scenario):
    """MoE TPOT rises at batch 2 (more experts read), but a latency server still takes 8 requests."""
    from planner.estimate.operating_points import LATENCY_MIN_NUM_SEQS

    lat = bundle(name, **scenario).profile("latency")
    fit = lat.plan.kv_cache_tokens // (lat.scenario.workload.input_len + lat.scenario.workload.output_len)
    assert lat.max_num_seqs >= min(LATENCY_MIN_NUM_SEQS, fit) and lat.max_num_seqs >= 2
    assert f"at least {min(LATENCY_MIN_NUM_SEQS, 256, fit)}" in lat.rule


@pytest.mark.parametrize(
    "name, scenario, expected",
    [
        ("meta-llama/Llama-3.1-8B", {"kv_cache_dtype": "int8"}, "Invalid kv_cache_dtype: 'int8'"),
        (
            "meta-llama/Llama-3.1-8B",
            {"kv_cache_dtype": "fp16"},
            'kv_cache_dtype="float16" is incompatible with dtype="bfloat16"',
        ),
    ],
)
def test_a_kv_cache_vllm_refuses_is_refused_with_its_reason(name, scenario, expected):
    from planner.errors import ScenarioError

    with pytest.raises(ScenarioError) as err:
        bundle(name, max_model_len=8192, **scenario)
    assert expected in str(err.value) and "--kv-cache-dtype" in str(err.value)
    assert err.value.hint and "fp8" in err.value.hint


def test_fp16_kv_is_fine_when_the_weights_are_served_in_fp16():
    c = yaml.safe_load(
        bundle("meta-llama/Llama-3.1-8B", max_model_len=8192, kv_cache_dtype="fp16", weight_dtype="fp16")
        .artefact("latency", "vllm-yaml")
        .text
    )
    assert (c["dtype"], c["kv-cache-dtype"]) == ("float16", "float16")


@pytest.mark.parametrize(
    "gpu, image, resource",
    [
        ("h100-sxm", "vllm/vllm-openai:v0.33.0", "nvidia.com/gpu"),
        ("mi300x", "vllm/vllm-openai-rocm:v0.33.0", "amd.com/gpu"),
        ("cpu", "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.33.0", None),
    ],
)
def test_each_vendor_gets_its_own_vllm_image(gpu, image, resource):
    b = bundle("Qwen/Qwen2.5-0.5B", gpu=gpu, max_model_len=4096)
    workload = next(yaml.safe_load_all(b.artefact("latency", "k8s").text))
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    assert container["image"] == image == b.deployment.image
    assert set(container["resources"]["requests"]) == {"cpu", "memory", *([resource] if resource else [])}


def test_gaudi_needs_an_image_given():
    from planner.errors import ScenarioError

    spec, loaded = spec_of("Qwen/Qwen2.5-0.5B")
    sc = Scenario(gpu="gaudi3", max_model_len=4096)
    with pytest.raises(ScenarioError, match="no published vLLM image for Intel") as err:
        export_bundle(spec, get_profile("gaudi3"), sc, loaded=loaded)
    assert "--image" in err.value.hint
    given = export_bundle(spec, get_profile("gaudi3"), sc, loaded=loaded, image="example.org/vllm-gaudi:1")
    assert given.deployment.image == "example.org/vllm-gaudi:1"


def test_sglang_eager_uses_the_current_cuda_graph_flags(bundles):
    words = command_words(bundles["70b-tp4-fp8kv-eager"].artefact("latency", "sglang").text)
    flags = parse_flags(words[2:])
    assert flags["cuda-graph-backend-decode"] == flags["cuda-graph-backend-prefill"] == "disabled"
    assert "disable-cuda-graph" not in flags
