"""Disaggregated prefill/decode (xPyD): KV transfer by hand, TTFT's parts, links, the comparison, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from planner.cli import main
from planner.errors import ScenarioError
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario, SpeculativeDecoding
from planner.serve.disagg import KV_LINKS, DisaggLayout, compare_layouts, simulate_disaggregated
from planner.serve.workload import ConcurrencyArrivals, FixedLength, PoissonArrivals, Workload

MODEL = build_spec(load_config("meta-llama/Llama-3.1-8B").config, "meta-llama/Llama-3.1-8B")
H100 = get_profile("h100-sxm")
SC = Scenario(max_model_len=16384)


def _workload(rate=3.0, n=300, prompt=4000, out=300) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate),
        num_requests=n,
        input_tokens=FixedLength(tokens=prompt),
        output_tokens=FixedLength(tokens=out),
    )


def test_kv_transfer_by_hand_over_rdma():
    # Llama-3.1-8B bf16: 32 layers x 8 KV heads x 128 x (K and V) x 2 B = 131,072 B per token on one GPU
    res = simulate_disaggregated(MODEL, H100, SC, _workload(), DisaggLayout(kv_transfer_link="rdma"))
    per_gpu = 4000 * 32 * 8 * 128 * 2 * 2
    assert res.kv_transfer_bytes_per_gpu_mean == per_gpu
    seconds = per_gpu / (50e9 * 190 / 400) + 46e-6  # the H100's 400 Gb/s per GPU at Mooncake's 190/400
    assert res.kv_transfer_seconds.mean == pytest.approx(seconds) and res.kv_transfer_seconds.p99 == pytest.approx(
        seconds
    )
    assert res.num_completed == 300 and res.gpus == 2


def test_ttft_is_prefill_plus_transfer_plus_the_decode_side():
    res = simulate_disaggregated(MODEL, H100, SC, _workload(), DisaggLayout())
    parts = res.prefill_queue_seconds.mean + res.kv_transfer_seconds.mean + res.decode_queue_seconds.mean
    assert res.ttft_seconds.mean == pytest.approx(parts, rel=1e-9)


def test_a_slower_link_delays_first_tokens_only():
    by_link = {
        k: simulate_disaggregated(MODEL, H100, SC, _workload(), DisaggLayout(kv_transfer_link=k)) for k in KV_LINKS
    }
    ttft = [by_link[k].ttft_seconds.mean for k in ("nvlink", "rdma", "tcp")]
    assert ttft[0] < ttft[1] < ttft[2]
    tpot = {round(r.tpot_seconds.p50, 9) for r in by_link.values()}
    assert len(tpot) == 1  # the decode pool's steps do not depend on how its KV arrived


def test_long_prompts_among_decodes_are_where_the_split_pays_for_tpot():
    # 12,000-token prompts at 2 req/s, 300-token answers: in an aggregated replica every decode step near an
    # arrival carries an 8,192-token prefill chunk; the decode pool's steps never do
    cmp = compare_layouts(MODEL, H100, SC, _workload(rate=2.0, prompt=12000, out=300), DisaggLayout())
    assert cmp.aggregated_replicas == 2
    assert cmp.disaggregated.tpot_seconds.p99 < cmp.aggregated_tpot_seconds.p99
    assert cmp.disaggregated.ttft_seconds.p99 > cmp.aggregated_ttft_seconds.p99  # the prefill pool and the transfer
    assert "P99 TPOT" in cmp.verdict and "disaggregated lower" in cmp.verdict and "aggregated lower" in cmp.verdict


def test_more_prefill_instances_shorten_the_prefill_queue():
    wl = _workload(rate=4.0, prompt=8000, out=100)
    one = simulate_disaggregated(MODEL, H100, SC, wl, DisaggLayout(prefill_instances=1))
    two = simulate_disaggregated(MODEL, H100, SC, wl, DisaggLayout(prefill_instances=2))
    assert two.prefill_queue_seconds.p99 < one.prefill_queue_seconds.p99
    assert two.gpus == 3 and np.isfinite(two.ttft_seconds.p99)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: simulate_disaggregated(
                MODEL, H100, SC, Workload(arrivals=ConcurrencyArrivals(concurrency=8)), DisaggLayout()
            ),
            "open-loop arrivals",
        ),
        (
            lambda: simulate_disaggregated(MODEL, get_profile("l40s"), SC, _workload(n=20), DisaggLayout()),
            "no network bandwidth",
        ),
        (lambda: DisaggLayout(prefill_instances=0), "greater than or equal to 1"),
        (lambda: DisaggLayout(kv_transfer_link="carrier-pigeon"), "'nvlink', 'rdma' or 'tcp'"),
    ],
)
def test_bad_layouts_are_refused(call, message):
    with pytest.raises((ScenarioError, ValidationError), match=message):
        call()


def test_the_cli_adds_the_comparison(capsys):
    argv = ["simulate", "meta-llama/Llama-3.1-8B", "--qps", "2", "--num-requests", "100", "--input-len", "4000"]
    assert main([*argv, "--prefill-instances", "1", "--decode-instances", "1", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)["disaggregated"]
    assert data["disaggregated"]["kv_transfer_seconds"]["mean"] > 0 and data["aggregated_replicas"] == 2
    assert main([*argv, "--decode-tp", "2"]) == 2
    assert "--prefill-instances turns on" in capsys.readouterr().err


def test_the_export_writes_each_pool_with_its_tp_replicas_and_the_nixl_connector(tmp_path, capsys):
    import yaml

    from planner.deploy.export import pd_bundle

    loaded = load_config("meta-llama/Llama-3.1-70B")
    model = build_spec(loaded.config, loaded.name)
    b = pd_bundle(model, H100, SC, prefill_instances=2, prefill_tp=4, decode_instances=1, decode_tp=8, loaded=loaded)
    files = {a.filename: a.text for a in b.artefacts}
    per_pool = (("vllm", "yaml"), ("vllm", "sh"), ("sglang", "sh"), ("k8s", "yaml"))
    assert set(files) == {f"{t}-{r}.{e}" for r in ("prefill", "decode") for t, e in per_pool} | {"router-sglang.sh"}
    prefill, decode = yaml.safe_load(files["vllm-prefill.yaml"]), yaml.safe_load(files["vllm-decode.yaml"])
    assert prefill["tensor-parallel-size"] == 4 and decode["tensor-parallel-size"] == 8
    for config in (prefill, decode):
        assert config["kv-transfer-config"] == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    assert prefill["max-num-batched-tokens"] > decode["max-num-batched-tokens"]  # throughput vs latency profile
    workloads = [next(yaml.safe_load_all(files[f"k8s-{r}.yaml"])) for r in ("prefill", "decode")]
    assert [w["spec"]["replicas"] for w in workloads] == [2, 1]
    assert workloads[0]["metadata"]["name"] != workloads[1]["metadata"]["name"]
    assert "--kv-transfer-config" in files["vllm-decode.sh"] and files["vllm-decode.sh"].startswith("#!")
    argv = ["export", "meta-llama/Llama-3.1-70B", "--prefill-instances", "1", "--decode-tp", "2"]
    assert main([*argv, "--target", "bench"]) == 2  # the bench command is not written for the pools
    assert "not written for disaggregated" in capsys.readouterr().err
    assert main([*argv, "--target", "all", "--output-dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)


def test_the_slo_search_sets_the_fewest_gpu_split_beside_the_aggregated_recommendation(capsys):
    argv = [
        "slo", "meta-llama/Llama-3.1-8B", "--gpus", "h100-sxm", "--tp", "1,2", "--qps", "8", "--input-len", "6000",
        "--output-len", "300", "--p99-tpot", "0.030", "--p99-ttft", "2.0", "--max-model-len", "16384",
        "--requests-per-probe", "300", "--compare-disaggregated", "--format", "json",
    ]  # fmt: skip
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    split = plan["disaggregated"]
    rec = plan["recommendation"]
    assert split["aggregated_gpus"] == rec["total_gpus"]
    gpus = [c["gpus"] for c in split["tried"]]
    assert gpus == sorted(gpus) and max(gpus) <= 1.5 * rec["total_gpus"]
    assert [c["meets"] for c in split["tried"]][:-1] == [False] * (len(gpus) - 1)  # it stops at the first that meets
    if split["best"] is not None:
        assert split["best"] == split["tried"][-1] and split["best"]["meets"]
        assert split["best"]["tpot_p99_seconds"] <= 0.030 and split["best"]["ttft_p99_seconds"] <= 2.0
    assert split["verdict"].split(":")[0] in ("disaggregated wins", "a tie on GPUs", "aggregated wins")
    assert "disaggregated" not in json.loads(
        (main(argv[:-3] + ["--format", "json"]), capsys.readouterr().out)[1]
    )  # off unless asked


# ------------------------------------------------------------------------------ speculative decode pool, DP engines

DRAFT = build_spec(load_config("meta-llama/Llama-3.2-1B").config, "meta-llama/Llama-3.2-1B")
SPECULATIVE = SC.model_copy(
    update={
        "speculative": SpeculativeDecoding(
            method="draft", num_speculative_tokens=3, acceptance_rate=0.7, draft_model="meta-llama/Llama-3.2-1B"
        )
    }
)


def test_the_decode_pool_speculates_with_the_draft_model_and_the_prefill_pool_does_not():
    layout = DisaggLayout(decode_instances=2, kv_transfer_link="nvlink")
    with pytest.raises(ScenarioError, match="was named but its config was not loaded"):
        compare_layouts(MODEL, H100, SPECULATIVE, _workload(), layout)  # method draft needs the draft's spec
    plain = compare_layouts(MODEL, H100, SC, _workload(), layout)
    spec = compare_layouts(MODEL, H100, SPECULATIVE, _workload(), layout, draft_model=DRAFT)
    # k = 3 at a = 0.7: ~2.5 tokens per verify step, so a decode step per token costs less
    assert spec.disaggregated.tpot_seconds.p50 < plain.disaggregated.tpot_seconds.p50
    assert spec.aggregated_tpot_seconds.p50 < plain.aggregated_tpot_seconds.p50  # the replicas speculate too
    # the prefill pool computes the prompt and one token, as without speculation
    assert spec.disaggregated.prefill_queue_seconds.p50 == pytest.approx(plain.disaggregated.prefill_queue_seconds.p50)


def test_the_cli_passes_the_draft_model_to_the_pools(capsys):
    main(
        [
            "simulate",
            "meta-llama/Llama-3.1-8B",
            "--qps",
            "3",
            "--num-requests",
            "300",
            "--input-len",
            "4000",
            "--output-len",
            "300",
            "--max-model-len",
            "16384",
            "--speculative-method",
            "draft",
            "--draft-model",
            "meta-llama/Llama-3.2-1B",
            "--num-speculative-tokens",
            "3",
            "--acceptance-rate",
            "0.7",
            "--prefill-instances",
            "1",
            "--decode-instances",
            "2",
            "--kv-transfer-link",
            "nvlink",
            "--format",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    layout = DisaggLayout(decode_instances=2, kv_transfer_link="nvlink")
    core = compare_layouts(MODEL, H100, SPECULATIVE, _workload(), layout, draft_model=DRAFT)
    assert out["disaggregated"]["verdict"] == core.verdict


MOE = build_spec(load_config("Qwen/Qwen3-30B-A3B").config, "Qwen/Qwen3-30B-A3B")


def test_with_data_parallel_each_instance_is_dp_engines_and_the_replicas_count_them():
    sc = Scenario(max_model_len=16384, enable_expert_parallel=True, data_parallel_size=2)
    workload = _workload(rate=6.0)
    res = simulate_disaggregated(MOE, H100, sc, workload, DisaggLayout())
    assert res.gpus == 4  # (1 x TP1 + 1 x TP1) x DP 2
    cmp = compare_layouts(MOE, H100, sc, workload, DisaggLayout())
    assert cmp.aggregated_replicas == 2  # 4 GPUs / (TP 1 x PP 1 x DP 2)
    assert "against 2 aggregated TP1 DP2 replicas" in cmp.verdict
    # each DP engine of a pool takes half its requests: one engine taking all 6 req/s of 4,000-token prompts
    # (a pool of one TP1 engine per side, what DP 2 was simulated as before) falls behind, DP 2 does not
    one = simulate_disaggregated(
        MOE,
        H100,
        sc.model_copy(update={"data_parallel_size": 1, "enable_expert_parallel": False}),
        workload,
        DisaggLayout(),
    )
    assert res.num_completed == one.num_completed == 300
    assert res.prefill_queue_seconds.p99 < one.prefill_queue_seconds.p99 / 2
    assert res.ttft_seconds.p99 < one.ttft_seconds.p99 / 10  # measured: 0.32 s vs 27.0 s
