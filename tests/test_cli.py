"""The command line: every command in every format, known values, bad inputs, the real entry point.

All in-process through ``planner.cli.main`` (capsys captures the output), offline: the conftest
points HF_ENDPOINT at a closed local port, and the gated-repo cases use the stand-in Hub on
127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner.cli import main
from planner.estimate.latency import estimate_latency
from planner.estimate.roofline import roofline
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import RequestShape, Scenario
from tests.conftest import CLOSED_LOCAL_ENDPOINT
from tests.hub_standin import HubStandin
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "planner" / "model" / "catalog"
SECRET = "hf_SeCrEtT0kenValue1234567890"


def run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """Config files for the cases that take a path: a good one (Qwen2.5-7B's), broken ones, an empty folder."""
    good = tmp_path / "my-model"
    good.mkdir()
    (good / "config.json").write_text((CATALOG / "Qwen--Qwen2.5-7B.json").read_text())
    (tmp_path / "bad.json").write_text('{"model_type": "llama", "hidden_size": 4096,')
    (tmp_path / "missing.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    (tmp_path / "weird.json").write_text(json.dumps({"model_type": "weird-arch", "num_hidden_layers": 2}))
    (tmp_path / "empty").mkdir()
    return {
        "config": str(good / "config.json"),
        "folder": str(good),
        "bad": str(tmp_path / "bad.json"),
        "missing": str(tmp_path / "missing.json"),
        "weird": str(tmp_path / "weird.json"),
        "empty": str(tmp_path / "empty"),
        "nothere": str(tmp_path / "nothere" / "config.json"),
        "notadir": str(good / "config.json" / "out"),
    }


def fill(argv: list[str], files: dict[str, str]) -> list[str]:
    return [files[a[1:-1]] if a.startswith("{") and a.endswith("}") else a for a in argv]


# ------------------------------------------------------------------- every command, format

INSPECT_KEYS = [
    "model_type",
    "total_params",
    "active_params",
    "weight_bytes",
    "kv_bytes_per_token",
    "kv_bytes_per_sequence",
    "state_bytes_per_sequence",
    "layers",
    "num_layers",
    "hidden_size",
    "heads",
    "kv_heads",
    "head_dim",
    "moe",
    "quantization",
    "max_position_embeddings",
    "dtype",
    "source",
    "warnings",
    "generic",
]
PLAN_KEYS = [
    "fits",
    "reason",
    "suggestions",
    "weight_bytes_per_gpu",
    "kv_cache_bytes_per_gpu",
    "activation_bytes_per_gpu",
    "kv_cache_tokens",
    "num_gpu_blocks",
    "max_concurrency",
    "max_model_len_that_fits",
    "resolved",
    "terms",
    "model",
    "gpu_id",
]
ROOFLINE_KEYS = ["layers", "total_seconds", "ridge_point", "kind", "verdict", "stage", "batch", "seq_len"]
LATENCY_KEYS = ["ttft_seconds", "tpot_seconds", "throughput_tokens_per_s", "requests_per_s", "kind", "e2e_seconds"]
HARDWARE_KEYS = [
    "id",
    "name",
    "memory_bytes",
    "hbm_bandwidth_bytes_per_s",
    "peak_flops_per_s",
    "gpus_per_node",
    "sources",
]
MODELS_KEYS = ["repo_id", "family", "aliases", "params", "active_params"]
EXPORT_KEYS = ["deployment", "profiles", "artefacts", "warnings", "written"]

#: Qwen3-30B-A3B (MoE) on two H100s with an fp8 KV cache: the plan row of COMMANDS and its known values.
PLAN_QWEN3_MOE_TP2_FP8 = [
    "plan",
    "Qwen/Qwen3-30B-A3B",
    "--gpu",
    "h100-sxm",
    "--tp",
    "2",
    "--kv-dtype",
    "fp8",
    "--max-model-len",
    "32768",
]

#: DeepSeek-V3 (MLA, MoE) decoding on eight H200s: the roofline row of COMMANDS and the library cross-check.
ROOFLINE_DEEPSEEK_DECODE = [
    "roofline",
    "deepseek-ai/DeepSeek-V3",
    "--gpu",
    "h200",
    "--tp",
    "8",
    "--stage",
    "decode",
    "--batch",
    "64",
    "--seq-len",
    "4096",
]

COMMANDS = [
    ("models", ["models"], MODELS_KEYS),
    ("inspect", ["inspect", "meta-llama/Llama-3.1-8B", "--context-len", "8192"], INSPECT_KEYS),
    ("plan", PLAN_QWEN3_MOE_TP2_FP8, PLAN_KEYS),
    ("roofline", ROOFLINE_DEEPSEEK_DECODE, ROOFLINE_KEYS),
    (
        "latency",
        ["latency", "{config}", "--gpu", "l40s", "--batch", "16", "--input-len", "2048", "--output-len", "256"],
        LATENCY_KEYS,
    ),
    ("hardware", ["hardware"], HARDWARE_KEYS),
    (
        "export",
        ["export", "llama3.1-8b", "--max-model-len", "8192", "--profile", "both", "--target", "all"],
        EXPORT_KEYS,
    ),
]


@pytest.mark.parametrize("fmt", ["table", "json", "yaml"])
@pytest.mark.parametrize(("argv", "keys"), [(c[1], c[2]) for c in COMMANDS], ids=[c[0] for c in COMMANDS])
def test_every_command_in_every_format(capsys, files, argv, keys, fmt):
    code, out, err = run_cli(capsys, fill(argv, files) + ["--format", fmt])
    assert code == 0, err
    assert "Traceback" not in out + err
    assert out.strip()
    if fmt == "table":
        return
    data = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    row = data[0] if isinstance(data, list) else data
    missing = set(keys) - set(row)
    assert not missing, f"{argv[0]} lacks {missing}"


def test_discovery_finds_the_commands_sorted():
    from planner.cli import discover_commands

    names = [m.NAME for m in discover_commands()]
    assert {"models", "inspect", "plan", "roofline", "latency", "hardware", "export"} <= set(names)
    modules = [m.__name__.rsplit(".", 1)[-1] for m in discover_commands()]
    assert modules == sorted(modules)
    assert "common" not in modules


# ------------------------------------------------------------------------- known values


def json_of(capsys, argv: list[str]):
    code, out, err = run_cli(capsys, argv + ["--format", "json"])
    assert code == 0, err
    return json.loads(out)


def test_inspect_llama_3_1_8b(capsys):
    d = json_of(capsys, ["inspect", "meta-llama/Llama-3.1-8B", "--context-len", "8192"])
    assert d["total_params"] == 8_030_261_248  # transformers on the meta device (shared/reference/params_oracle.json)
    assert d["active_params"] == d["total_params"]
    # 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes = 131,072 bytes per token
    assert d["kv_bytes_per_token"] == 131_072
    assert d["kv_bytes_per_sequence"] == 8192 * 131_072
    assert d["state_bytes_per_sequence"] == 0
    assert d["layers"] == ["full_attention"] * 32
    assert (d["heads"], d["kv_heads"], d["head_dim"], d["num_layers"]) == (32, 8, 128, 32)
    assert d["kv_cache_dtype"] == "bf16" and d["moe"] is None and d["quantization"] is None and d["generic"] is False


def test_inspect_kv_dtype_fp8_halves_the_kv_bytes(capsys):
    d = json_of(capsys, ["inspect", "llama3.1-8b", "--context-len", "2048", "--kv-dtype", "fp8"])
    assert d["kv_bytes_per_sequence"] == 2048 * 131_072 // 2


def test_inspect_moe_and_sliding_and_quantized(capsys):
    moe = json_of(capsys, ["inspect", "Qwen/Qwen3-30B-A3B"])
    assert moe["moe"]["num_experts"] == 128 and moe["moe"]["experts_per_token"] == 8
    assert moe["active_params"] < moe["total_params"]
    gemma = json_of(capsys, ["inspect", "google/gemma-2-9b", "--context-len", "8192"])
    assert gemma["sliding_windows"] == [4096]
    awq = json_of(capsys, ["inspect", "Qwen/Qwen3-4B-AWQ"])
    assert awq["quantization"]["method"] == "awq"


def test_plan_qwen3_moe_tp2_fp8(capsys):
    d = json_of(capsys, PLAN_QWEN3_MOE_TP2_FP8)
    assert d["fits"] is True
    assert d["resolved"]["tp"] == 2 and d["resolved"]["kv_cache_dtype"] == "fp8"
    assert d["resolved"]["max_model_len"] == 32768
    assert d["kv_cache_tokens"] > 0 and d["num_gpu_blocks"] > 0 and d["max_concurrency"] >= 1
    assert d["max_model_len_that_fits"] >= 32768
    assert d["gpu_id"] == "h100-sxm" and d["model"] == "Qwen/Qwen3-30B-A3B"


def test_plan_that_does_not_fit_is_a_result_not_an_error(capsys):
    code, out, err = run_cli(capsys, ["plan", "meta-llama/Llama-3.1-70B", "--gpu", "h100-sxm", "--format", "json"])
    assert code == 0, err
    d = json.loads(out)
    assert d["fits"] is False and d["reason"].startswith("does not start")
    assert any("--tensor-parallel-size" in s for s in d["suggestions"])  # each one re-planned by the core


def test_roofline_deepseek_decode_matches_the_library(capsys):
    d = json_of(capsys, ROOFLINE_DEEPSEEK_DECODE)
    assert (d["stage"], d["batch"], d["seq_len"], d["tp"], d["kind"]) == ("decode", 64, 4096, 8, "estimate")
    for op in d["layers"]:
        assert {"name", "flops", "bytes", "arithmetic_intensity", "bound", "seconds"} <= set(op)
    # The CLI is a thin shell: its numbers are the library's, unchanged.
    loaded = load_config("deepseek-ai/DeepSeek-V3")
    spec = build_spec(loaded.config, loaded.name)
    direct = roofline(spec, get_profile("h200"), Scenario(gpu="h200", tp=8), "decode", 64, 4096)
    assert d["total_seconds"] == pytest.approx(direct.total_seconds, rel=1e-12)
    assert d["ridge_point"] == pytest.approx(direct.ridge_point, rel=1e-12)
    assert len(d["layers"]) == len(direct.layers)


def test_latency_from_a_config_path_matches_the_library(capsys, files):
    d = json_of(
        capsys,
        ["latency", files["config"], "--gpu", "l40s", "--batch", "16", "--input-len", "2048", "--output-len", "256"],
    )
    spec = build_spec(json.loads(Path(files["config"]).read_text()), files["config"])
    sc = Scenario(gpu="l40s", workload=RequestShape(batch_size=16, input_len=2048, output_len=256))
    direct = estimate_latency(spec, get_profile("l40s"), sc)
    assert d["kind"] == "estimate"
    assert d["ttft_seconds"] == pytest.approx(direct.ttft_seconds, rel=1e-12)
    assert d["tpot_seconds"] == pytest.approx(direct.tpot_seconds, rel=1e-12)
    assert d["batch_size"] == 16 and d["input_len"] == 2048 and d["output_len"] == 256


def test_latency_bound_is_labelled_and_faster_than_the_estimate(capsys, files):
    argv = ["latency", files["folder"], "--gpu", "l40s", "--batch", "16"]
    estimate = json_of(capsys, argv)
    bound = json_of(capsys, argv + ["--bound"])
    assert bound["kind"] == "bound" and estimate["kind"] == "estimate"
    assert bound["tpot_seconds"] < estimate["tpot_seconds"]


def test_hardware_lists_every_profile_with_sources(capsys):
    d = json_of(capsys, ["hardware"])
    ids = [p["id"] for p in d]
    assert ids == sorted(ids) and {"h100-sxm", "h200", "l40s", "mi300x"} <= set(ids)
    h100 = next(p for p in d if p["id"] == "h100-sxm")
    assert h100["memory_bytes"] == 85_027_979_264 and h100["sources"]
    one = json_of(capsys, ["hardware", "H100"])
    assert [p["id"] for p in one] == ["h100-sxm"]


def test_models_lists_the_catalog_and_searches_it(capsys):
    d = json_of(capsys, ["models"])
    llama = next(m for m in d if m["repo_id"] == "meta-llama/Llama-3.1-8B")
    assert llama["params"] == 8_030_261_248 and "llama3.1-8b" in llama["aliases"]
    assert len(d) >= 30 and all(m["error"] is None for m in d)
    found = json_of(capsys, ["models", "--search", "qwen3"])
    assert found and all("qwen" in m["repo_id"].lower() for m in found)


def test_table_output_labels_predictions(capsys):
    _, out, _ = run_cli(capsys, ["latency", "llama3.1-8b", "--batch", "4"])
    assert "estimate" in out and "ms" in out
    _, out, _ = run_cli(capsys, ["plan", "llama3.1-8b", "--max-model-len", "8192"])
    assert "GiB" in out and "exact" in out and "estimate" in out
    _, out, _ = run_cli(capsys, ["roofline", "llama3.1-8b", "--bound"])
    assert "bound" in out


def test_help_exits_zero(capsys):
    code, out, _ = run_cli(capsys, ["plan", "--help"])
    assert code == 0 and "--tensor-parallel-size" in out and "--kv-cache-dtype" in out


# --------------------------------------------------------------------------- bad input

BAD_INPUTS = [
    ("unknown GPU", ["plan", "llama3.1-8b", "--gpu", "h900"], "unknown GPU 'h900'"),
    ("TP not dividing heads", ["plan", "llama3.1-8b", "--tp", "3"], "--tp 3 does not divide the 32 attention heads"),
    (
        "max-model-len too long",
        ["plan", "llama3.1-8b", "--max-model-len", "1000000"],
        "exceeds the model's maximum context of 131,072 tokens",
    ),
    ("malformed config.json", ["inspect", "{bad}"], "is not valid JSON"),
    ("unknown catalog name", ["inspect", "no-such-model-xyz", "--source", "catalog"], "is not in the bundled catalog"),
    ("missing keys", ["inspect", "{missing}"], "config.json lacks 'hidden_size"),
    ("unknown model_type without keys", ["inspect", "{weird}"], "unknown model_type 'weird-arch'"),
    ("no such file", ["inspect", "{nothere}"], "no file at"),
    ("folder without config.json", ["inspect", "{empty}"], "has no config.json"),
    ("bad --precision form", ["plan", "llama3.1-8b", "--precision", "mlp"], "--precision expects COMPONENT=DTYPE"),
    ("bad --precision component", ["plan", "llama3.1-8b", "--precision", "gills=int4"], "unknown component 'gills'"),
    ("bad --precision dtype", ["plan", "llama3.1-8b", "--precision", "mlp=int3"], "unknown dtype 'int3' for mlp"),
    ("bad --kv-dtype", ["plan", "llama3.1-8b", "--kv-dtype", "fp4"], "unknown --kv-cache-dtype 'fp4'"),
    ("bad --weight-dtype", ["latency", "llama3.1-8b", "--weight-dtype", "int3"], "unknown --weight-dtype 'int3'"),
    (
        "utilization above 1",
        ["plan", "llama3.1-8b", "--gpu-memory-utilization", "1.5"],
        "--gpu-memory-utilization must be less than or equal to 1 (got 1.5)",
    ),
    ("tp 0", ["plan", "llama3.1-8b", "--tp", "0"], "--tp must be greater than or equal to 1 (got 0)"),
    ("batch 0", ["latency", "llama3.1-8b", "--batch", "0"], "--batch must be greater than or equal to 1 (got 0)"),
    ("fewer GPUs than tp x pp", ["plan", "llama3.1-8b", "--num-gpus", "1", "--tp", "2"], "--num-gpus 1 is fewer than"),
    ("not an integer", ["plan", "llama3.1-8b", "--tp", "abc"], "invalid int value: 'abc'"),
    (
        "context-len 0",
        ["inspect", "llama3.1-8b", "--context-len", "0"],
        "--context-len must be greater than or equal to 1 (got 0)",
    ),
    ("unknown command", ["frobnicate"], "invalid choice: 'frobnicate'"),
    ("unknown export target", ["export", "llama3.1-8b", "--target", "helm"], "invalid choice: 'helm'"),
    ("no command", [], "the following arguments are required: COMMAND"),
]


@pytest.mark.parametrize(("argv", "fragment"), [(b[1], b[2]) for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_one_error_line_and_exit_2(capsys, files, argv, fragment):
    code, out, err = run_cli(capsys, fill(argv, files))
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: ")
    assert fragment in err


#: Failures of the run, not of the command line: exit status 1 (planner.cli.EXIT_CODES).
RUNTIME_FAILURES = [
    (
        "unknown repo, Hub unreachable",
        ["inspect", "acme/no-such-model"],
        "cannot get 'acme/no-such-model' from the Hub",
    ),
    ("output folder inside a file", ["export", "llama3.1-8b", "--output-dir", "{notadir}"], "Not a directory"),
]


@pytest.mark.parametrize(
    ("argv", "fragment"), [(b[1], b[2]) for b in RUNTIME_FAILURES], ids=[b[0] for b in RUNTIME_FAILURES]
)
def test_runtime_failure_is_one_error_line_and_exit_1(capsys, files, argv, fragment):
    code, out, err = run_cli(capsys, fill(argv, files))
    assert code == 1
    assert out == ""
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: ")
    assert fragment in err


# ------------------------------------------------------------------------ entry point


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env["HF_ENDPOINT"] = CLOSED_LOCAL_ENDPOINT
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_python_dash_m_planner_models():
    proc = subprocess.run(
        [sys.executable, "-m", "planner", "models"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "meta-llama/Llama-3.1-8B" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "planner", "plan", "llama3.1-8b", "--tp", "3"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


# -------------------------------------------------------------------------- the token


@pytest.fixture
def gated_hub(hub: HubStandin) -> HubStandin:
    config = json.loads((CATALOG / "meta-llama--Llama-3.2-1B.json").read_text())
    hub.add_repo("acme/Gated-1B", {"config.json": config}, gated_token=SECRET)
    return hub


def test_token_opens_a_gated_repo_and_never_appears(capsys, gated_hub, tmp_path):
    runs = [
        ["inspect", "acme/Gated-1B", "--hf-token", SECRET, "--format", "json"],
        ["plan", "acme/Gated-1B", f"--hf-token={SECRET}", "--format", "yaml"],
        ["export", "acme/Gated-1B", "--hf-token", SECRET, "--profile", "both", "--target", "all", "--format", "json"],
        ["export", "acme/Gated-1B", "--hf-token", SECRET, "--target", "all", "--output-dir", str(tmp_path / "out")],
        ["latency", "acme/Gated-1B", "--hf-token", SECRET],
    ]
    for argv in runs:
        code, out, err = run_cli(capsys, argv)
        assert code == 0, err
        assert SECRET not in out and SECRET not in err
    assert any(r.token == SECRET for r in gated_hub.requests)  # it was sent to the Hub, and only there
    for path in (tmp_path / "out").iterdir():
        assert SECRET not in path.read_text()


def test_token_from_the_environment_never_appears(capsys, gated_hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    code, out, err = run_cli(
        capsys, ["export", "acme/Gated-1B", "--target", "all", "--profile", "both", "--format", "yaml"]
    )
    assert code == 0, err
    assert SECRET not in out and SECRET not in err


def test_token_is_masked_in_errors(capsys, gated_hub):
    wrong = "hf_WrongToken000000000000"
    cases = [
        ["inspect", "acme/Gated-1B", "--hf-token", wrong],  # 403 from the Hub
        ["plan", "llama3.1-8b", "--hf_token", SECRET],  # mistyped flag argparse quotes back
        ["plan", "llama3.1-8b", "--hf-token", SECRET, "--tp", "3"],
        ["plan", "llama3.1-8b", "--hf-token", SECRET, "--gpu", SECRET],  # a token pasted in the wrong place
    ]
    for argv in cases:
        code, out, err = run_cli(capsys, argv)
        assert code == 2
        assert wrong not in out + err and SECRET not in out + err
        assert err.strip().splitlines()[-1].startswith("error: ")


# -------------------------------------------------------------------------------- docs


def test_docs_cli_md_matches_the_generator():
    expected = load_script("tools/gen_cli_docs.py").render()
    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == expected, "docs/cli.md is stale: run python tools/gen_cli_docs.py"
    for name in ("models", "inspect", "plan", "roofline", "latency", "hardware", "export"):
        assert f"## {name}" in current


def test_overhead_estimates_can_be_given_in_gib(capsys: pytest.CaptureFixture[str]) -> None:
    """The memory plan's non-torch and CUDA-graph estimates are adjustable from the command line."""
    code, out, _ = run_cli(
        capsys,
        [
            "plan",
            "meta-llama/Llama-3.1-8B",
            "--non-torch-memory-gib",
            "2.5",
            "--cuda-graph-memory-gib",
            "0",
            "--format",
            "json",
        ],
    )
    assert code == 0
    plan = json.loads(out)
    assert plan["non_torch_bytes_per_gpu"] == int(2.5 * 2**30) and plan["cuda_graph_bytes_per_gpu"] == 0
    default = json.loads(run_cli(capsys, ["plan", "meta-llama/Llama-3.1-8B", "--format", "json"])[1])
    # 2.1 GiB more non-torch and 0.63 GiB less graph pool move the KV budget by exactly their difference
    moved = default["kv_cache_bytes_per_gpu"] - plan["kv_cache_bytes_per_gpu"]
    assert (
        moved
        == plan["non_torch_bytes_per_gpu"] - default["non_torch_bytes_per_gpu"] - default["cuda_graph_bytes_per_gpu"]
    )
