"""The exports through the engines' own parsers: vLLM 0.33.0's `vllm serve` parser and
create_engine_config, SGLang 0.5.23's ServerArgs, kubernetes-validate 1.37 strict and the
LeaderWorkerSet schema (tools/check_exports.py, run in the isolated .venv-engines/ that .ci/run
builds from tools/engines-requirements.txt).

Without that environment these tests skip, saying why; with PLANNER_REQUIRE_ENGINES=1 (set by
.ci/run) a missing environment is a failure. PLANNER_ENGINES_PYTHON names another interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner.deploy.export import ROUTER_FILE, ExportBundle, export_bundle, pd_bundle
from planner.errors import ScenarioError
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / "tools" / "check_exports.py"
CATALOG = ROOT / "planner" / "model" / "catalog"
ENGINES_PYTHON = Path(os.environ.get("PLANNER_ENGINES_PYTHON", ROOT / ".venv-engines" / "bin" / "python"))
CHECK_TIMEOUT_S = 600

# The scenario matrix of issue 9: each an export the engines must accept as written.
MATRIX = {
    "dense": ("meta-llama/Llama-3.1-8B", {"max_model_len": 8192}),
    "moe": ("Qwen/Qwen3-30B-A3B", {"tp": 2, "max_model_len": 32768}),
    "mixtral-fp8-weights": ("mistralai/Mixtral-8x7B-v0.1", {"tp": 2, "weight_dtype": "fp8", "max_model_len": 8192}),
    "mla": ("deepseek-ai/DeepSeek-V2-Lite", {"max_model_len": 16384}),
    "multi-node": ("deepseek-ai/DeepSeek-V3", {"tp": 8, "pp": 2, "max_model_len": 32768, "kv_cache_dtype": "fp8"}),
    "eager": ("meta-llama/Llama-3.1-70B", {"tp": 4, "engine": "eager", "max_model_len": 16384}),
    "nccl-all-reduce": (
        "meta-llama/Llama-3.1-70B",
        {"tp": 4, "disable_custom_all_reduce": True, "max_model_len": 16384},
    ),
    "chunked-prefill-off": ("Qwen/Qwen2.5-7B", {"gpu": "l40s", "enable_chunked_prefill": False, "max_model_len": 8192}),
    "fp8-kv": ("meta-llama/Llama-3.1-8B", {"kv_cache_dtype": "fp8", "max_model_len": 32768}),
    "awq": ("Qwen/Qwen3-4B-AWQ", {"gpu": "l40s", "block_size": 32}),
    "amd": ("meta-llama/Llama-3.1-70B", {"gpu": "mi300x", "tp": 2, "max_model_len": 16384}),
    "priority-scheduling": ("meta-llama/Llama-3.1-8B", {"max_model_len": 8192, "scheduling_policy": "priority"}),
    "expert-parallel": ("Qwen/Qwen3-30B-A3B", {"tp": 2, "enable_expert_parallel": True, "max_model_len": 32768}),
    "ep-dp-attention": (
        "deepseek-ai/DeepSeek-V3",
        {
            "gpu": "h200",
            "data_parallel_size": 8,
            "enable_expert_parallel": True,
            "all2all_backend": "deepep_low_latency",
            "max_model_len": 32768,
        },
    ),
    # DP 16 over two 8-GPU nodes, one GPU per rank: vLLM's multi-node DP launch (no Ray), a LeaderWorkerSet of 2
    "dp-multi-node": (
        "deepseek-ai/DeepSeek-V3",
        {
            "gpu": "h200",
            "data_parallel_size": 16,
            "enable_expert_parallel": True,
            "all2all_backend": "deepep_low_latency",
            "max_model_len": 32768,
        },
    ),
}
TARGETS = ("vllm-yaml", "vllm-cmd", "sglang", "k8s")
#: Disaggregated prefill/decode exports (pd_bundle): each pool's vLLM config, command and manifest, and its SGLang
#: launch (--disaggregation-mode, the transfer backend of the KV link). The router (router-sglang.sh) is not
#: parser-checked: the sglang-router package is not in the engines' environment.
PD_MATRIX = {
    "pd-dense": ("meta-llama/Llama-3.1-70B", {"max_model_len": 16384}, (2, 4, 1, 8), "rdma"),
    "pd-moe": ("Qwen/Qwen3-30B-A3B", {"max_model_len": 32768}, (1, 1, 1, 2), "tcp"),
}


def engines_available() -> bool:
    if ENGINES_PYTHON.exists():
        return True
    reason = (
        f"no engines environment at {ENGINES_PYTHON}: build it as .ci/run does (python -m venv .venv-engines && "
        ".venv-engines/bin/pip install --no-deps -r tools/engines-requirements.txt)"
    )
    if os.environ.get("PLANNER_REQUIRE_ENGINES") == "1":
        pytest.fail(reason + "; PLANNER_REQUIRE_ENGINES=1 makes that a failure")
    pytest.skip(reason)
    return False


def catalog_config(repo: str) -> Path:
    return CATALOG / (repo.replace("/", "--") + ".json")


def export(name: str, **scenario) -> ExportBundle:
    loaded = load_config(name)
    sc = Scenario(**scenario)
    return export_bundle(build_spec(loaded.config, loaded.name), get_profile(sc.gpu), sc, loaded=loaded)


def _checker_args(files: list[Path], repos: set[str]) -> list[str]:
    args = [str(ENGINES_PYTHON), str(CHECKER)]
    for repo in sorted(repos):
        args += ["--model-config", f"{repo}={catalog_config(repo)}"]
    return [*args, *map(str, files)]


def run_checker(*batches: tuple[list[Path], set[str]]) -> list[dict]:
    """tools/check_exports.py over each batch of files in the engines' environment, the batches in
    parallel (vLLM's and SGLang's imports take ~15 s each): one verdict per check."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    procs = [
        subprocess.Popen(
            _checker_args(files, repos), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for files, repos in batches
    ]
    rows: list[dict] = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        batch = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert batch, f"the checker printed no verdict (exit {proc.returncode}):\n{err[-3000:]}"
        assert proc.returncode == (1 if any(not r["ok"] for r in batch) else 0), err[-3000:]
        rows += batch
    return rows


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, list[dict]]:
    """Every target of every matrix scenario through the checker (one run per engine, in parallel)."""
    engines_available()
    root = tmp_path_factory.mktemp("exports")
    files: list[Path] = []
    for case, (name, scenario) in MATRIX.items():
        b = export(name, **scenario)
        files += [write(root / case, a.filename, a.text) for a in b.artefacts if a.target in TARGETS]
    for case, (name, scenario, (p_n, p_tp, d_n, d_tp), link) in PD_MATRIX.items():
        loaded = load_config(name)
        sc = Scenario(**scenario)
        b = pd_bundle(
            build_spec(loaded.config, loaded.name),
            get_profile(sc.gpu),
            sc,
            prefill_instances=p_n,
            prefill_tp=p_tp,
            decode_instances=d_n,
            decode_tp=d_tp,
            kv_transfer_link=link,
            loaded=loaded,
        )
        files += [write(root / case, a.filename, a.text) for a in b.artefacts if a.filename != ROUTER_FILE]
    repos = {name for name, _ in MATRIX.values()} | {name for name, *_ in PD_MATRIX.values()}
    sglang = [f for f in files if f.name.startswith("sglang-")]
    rest = [f for f in files if f not in sglang]
    rows = run_checker((rest, repos), (sglang, repos))
    by_case: dict[str, list[dict]] = {case: [] for case in (*MATRIX, *PD_MATRIX)}
    for row in rows:
        by_case[Path(row["file"].split(" ")[0]).parent.name].append(row)
    return by_case


@pytest.mark.parametrize("case", MATRIX)
def test_the_engines_accept_the_export(verdicts, case):
    rows = verdicts[case]
    failed = [f"{r['file']}: {r['check']}: {r['error']}" for r in rows if not r["ok"]]
    assert not failed, "\n".join(failed)
    checks = {r["check"] for r in rows}
    assert {
        "vllm serve --config (parser)",
        "vllm serve --config (every key honoured)",
        "vllm create_engine_config",
        "sglang ServerArgs",
        "sglang no deprecated flag",
    } <= checks
    assert any(c.startswith("kubernetes-validate 1.37.0 strict") for c in checks)
    if case in ("multi-node", "dp-multi-node"):
        assert any(c.startswith("LeaderWorkerSet schema") for c in checks)
    if case == "dp-multi-node":  # both per-node commands and both pod templates went through vLLM's parser
        parsed = {r["file"].split("/")[-1] for r in rows if r["check"] == "vllm create_engine_config"}
        assert {"vllm-latency.sh command 1 of 2", "vllm-latency.sh command 2 of 2"} <= parsed
        assert any(f.endswith("leaderTemplate") for f in parsed) and any(f.endswith("workerTemplate") for f in parsed)


def test_multi_node_data_parallel_writes_each_nodes_launch():
    """DP 16 on two 8-GPU nodes: node 0 serves the API with its 8 local ranks, node 1 runs ranks 8..15 headless,
    both naming node 0's address and one RPC port (vLLM docs, Data Parallel Deployment, multi-node); no Ray, and
    no warning that the flags are missing."""
    name, scenario = MATRIX["dp-multi-node"]
    b = export(name, **scenario)
    assert b.deployment.data_parallel_size_local == 8 and b.deployment.nodes_per_replica == 2
    assert not any("data-parallel-size-local" in w for w in b.warnings)
    config = yaml.safe_load(b.artefact("latency", "vllm-yaml").text)
    assert config["data-parallel-size"] == 16 and config["data-parallel-size-local"] == 8
    assert "distributed-executor-backend" not in config and "headless" not in config
    script = b.artefact("latency", "vllm-cmd").text
    leader, worker = script.split("\nelse\n")
    assert '--data-parallel-address "$LEADER_ADDR"' in leader and "--headless" not in leader
    assert "--data-parallel-start-rank" not in leader
    assert "--headless" in worker and '--data-parallel-start-rank "$((NODE_RANK*8))"' in worker
    assert script.count("--data-parallel-rpc-port 13345") == 2
    lws, _service = yaml.safe_load_all(b.artefact("latency", "k8s").text)
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    lead = group["leaderTemplate"]["spec"]["containers"][0]
    assert lead["command"] == ["vllm", "serve"] and lead["args"][-2:] == [
        "--data-parallel-address",
        "$(LWS_LEADER_ADDRESS)",
    ]
    work = group["workerTemplate"]["spec"]["containers"][0]["args"][0]
    assert work.startswith("exec vllm serve ") and "ray" not in work
    assert work.endswith("--headless --data-parallel-start-rank $((LWS_WORKER_INDEX*8))")


def test_an_engine_across_nodes_stays_on_ray():
    """DP 2 of TP 16 engines on 8-GPU nodes: an engine spans two nodes, so no DP rank is whole on a node; the
    export runs on Ray and says why."""
    b = export("deepseek-ai/DeepSeek-V3", tp=16, data_parallel_size=2, enable_expert_parallel=True, max_model_len=32768)
    assert b.deployment.data_parallel_size_local is None
    assert yaml.safe_load(b.artefact("latency", "vllm-yaml").text)["distributed-executor-backend"] == "ray"
    assert any("does not fit whole DP ranks on each node" in w for w in b.warnings)


@pytest.mark.parametrize("case", PD_MATRIX)
def test_the_engines_accept_both_pools_of_a_disaggregated_export(verdicts, case):
    rows = verdicts[case]
    failed = [f"{r['file']}: {r['check']}: {r['error']}" for r in rows if not r["ok"]]
    assert not failed, "\n".join(failed)
    checks = {r["check"] for r in rows}
    assert {
        "vllm serve --config (parser)",
        "vllm serve --config (every key honoured)",
        "vllm create_engine_config",
        "sglang ServerArgs",
        "sglang no deprecated flag",
    } <= checks
    assert any(c.startswith("kubernetes-validate 1.37.0 strict") for c in checks)
    assert {Path(r["file"].split(" ")[0]).name for r in rows} >= {
        "vllm-prefill.yaml",
        "vllm-decode.yaml",
        "k8s-decode.yaml",
        "sglang-prefill.sh",
        "sglang-decode.sh",
    }


@pytest.mark.parametrize("link, backend", [("rdma", "mooncake"), ("nvlink", "mooncake"), ("tcp", "mooncake_tcp")])
def test_sglang_pools_and_router_of_a_disaggregated_export(link, backend):
    """Each SGLang pool runs its --disaggregation-mode with the KV link's transfer backend, the prefill pool opens
    its bootstrap port, and the router names every prefill URL with that port and every decode URL."""
    loaded = load_config("meta-llama/Llama-3.1-70B")
    sc = Scenario(max_model_len=16384)
    b = pd_bundle(
        build_spec(loaded.config, loaded.name),
        get_profile(sc.gpu),
        sc,
        prefill_instances=2,
        prefill_tp=4,
        decode_instances=1,
        decode_tp=8,
        kv_transfer_link=link,
        loaded=loaded,
    )
    files = {a.filename: a.text for a in b.artefacts}
    prefill, decode, router = files["sglang-prefill.sh"], files["sglang-decode.sh"], files[ROUTER_FILE]
    assert "--disaggregation-mode prefill" in prefill and "--disaggregation-bootstrap-port 8998" in prefill
    assert "--disaggregation-mode decode" in decode and "--disaggregation-bootstrap-port" not in decode
    assert (
        f"--disaggregation-transfer-backend {backend} " in prefill + " "
        and f"--disaggregation-transfer-backend {backend}" in decode
    )
    assert "--tp-size 4" in prefill and "--tp-size 8" in decode
    assert "python -m sglang_router.launch_router \\\n  --pd-disaggregation" in router
    assert router.count("--prefill ") == 2 and router.count(':30000" 8998') == 2 and router.count("--decode ") == 1
    assert '"http://$PREFILL_2:30000" 8998' in router and '"http://$DECODE_1:30000"' in router
    assert "Not checked by a parser" in router


def test_an_unknown_kv_link_is_refused_by_name():
    loaded = load_config("meta-llama/Llama-3.1-8B")
    sc = Scenario(max_model_len=8192)
    with pytest.raises(ScenarioError, match="--kv-transfer-link 'infiniband'"):
        pd_bundle(
            build_spec(loaded.config, loaded.name),
            get_profile(sc.gpu),
            sc,
            prefill_instances=1,
            prefill_tp=1,
            decode_instances=1,
            decode_tp=1,
            kv_transfer_link="infiniband",
        )


# ---------------------------------------------------- the checker can fail: the old defects


def _dense_yaml_with(tmp_path: Path, key: str, value: object) -> Path:
    b = export("meta-llama/Llama-3.1-8B", max_model_len=8192)
    config = yaml.safe_load(b.artefact("latency", "vllm-yaml").text)
    config = {k: v for k, v in config.items() if k not in (key, f"no-{key}")}
    config[key] = value
    return write(tmp_path, f"vllm-{key}.yaml", yaml.safe_dump(config, sort_keys=False))


#: vLLM 0.33.0's own words for the two KV caches it refuses (vllm/config/cache.py CacheConfig and
#: VllmConfig's dtype check); the planner's refusal must quote them.
VLLM_REASONS = {
    "int8": "Invalid kv_cache_dtype: 'int8'",
    "fp16": 'kv_cache_dtype="float16" is incompatible with dtype="bfloat16"',
}
VLLM_SPELLING = {"int8": "int8", "fp16": "float16"}


@pytest.fixture(scope="module")
def defects(tmp_path_factory) -> tuple[dict[str, Path], dict[tuple[str, str], str]]:
    """Each defect issue 9 found, written as the planner used to write it, through the checker."""
    engines_available()
    root = tmp_path_factory.mktemp("defects")
    files = {"dropped": _dense_yaml_with(root / "dropped", "enable-chunked-prefill", False)}
    for kv, value in VLLM_SPELLING.items():
        files[kv] = _dense_yaml_with(root / kv, "kv-cache-dtype", value)
    mn = export("deepseek-ai/DeepSeek-V3", tp=8, pp=2, max_model_len=32768, kv_cache_dtype="fp8")
    lws, service = yaml.safe_load_all(mn.artefact("latency", "k8s").text)
    service["metadata"]["name"] = lws["metadata"]["name"]
    files["same-name"] = write(root / "same-name", "k8s-latency.yaml", yaml.safe_dump_all([lws, service]))
    sglang = mn.artefact("latency", "sglang").text
    files["legacy"] = write(
        root / "legacy", "sglang-legacy.sh", sglang.replace("sglang serve", "python -m sglang.launch_server")
    )
    files["deprecated"] = write(
        root / "deprecated",
        "sglang-deprecated.sh",
        "sglang serve --model-path meta-llama/Llama-3.1-8B --disable-cuda-graph\n",
    )
    repos = {"meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-V3"}
    vllm = [files[k] for k in ("dropped", "int8", "fp16", "same-name")]
    rows = run_checker((vllm, repos), ([files["legacy"], files["deprecated"]], repos))
    return files, {(r["file"].split(" ")[0], r["check"]): r["error"] for r in rows if not r["ok"]}


def test_the_checker_catches_what_the_old_exports_did(defects):
    files, errors = defects
    assert (
        "did not take effect: vLLM parsed enable_chunked_prefill=None"
        in errors[(str(files["dropped"]), "vllm serve --config (every key honoured)")]
    )
    for kv, reason in VLLM_REASONS.items():
        assert reason in errors[(str(files[kv]), "vllm create_engine_config")]
    lws_name = next(yaml.safe_load_all(files["same-name"].read_text()))["metadata"]["name"]
    assert (
        "creates no headless Service" in errors[(str(files["same-name"]), f"LWS headless Service Service/{lws_name}")]
    )
    assert "python -m sglang.launch_server" in errors[(str(files["legacy"]), "sglang serve command")]
    assert "'--disable-cuda-graph' is deprecated" in errors[(str(files["deprecated"]), "sglang no deprecated flag")]
    # The planner's own exports of these scenarios pass (test_the_engines_accept_the_export): the checks discriminate.


@pytest.mark.parametrize("kv", VLLM_REASONS)
def test_what_vllm_refuses_the_planner_refuses_with_the_same_reason(defects, kv):
    files, errors = defects
    assert VLLM_REASONS[kv] in errors[(str(files[kv]), "vllm create_engine_config")]  # the engine's words
    with pytest.raises(ScenarioError) as planner_error:
        export("meta-llama/Llama-3.1-8B", max_model_len=8192, kv_cache_dtype=kv)
    assert VLLM_REASONS[kv] in str(planner_error.value)  # quoted by the planner
    assert "--kv-cache-dtype" in str(planner_error.value) and "fp8" in planner_error.value.hint


def test_the_skip_turns_into_a_failure_in_ci(monkeypatch):
    """With PLANNER_REQUIRE_ENGINES=1 a missing environment fails instead of skipping."""
    import tests.test_export_engines as module

    monkeypatch.setattr(module, "ENGINES_PYTHON", Path("/nonexistent/python"))
    monkeypatch.setenv("PLANNER_REQUIRE_ENGINES", "1")
    with pytest.raises(pytest.fail.Exception, match="PLANNER_REQUIRE_ENGINES=1"):
        module.engines_available()
    monkeypatch.setenv("PLANNER_REQUIRE_ENGINES", "0")
    with pytest.raises(pytest.skip.Exception, match="no engines environment"):
        module.engines_available()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
