"""Expert parallelism and attention data parallelism (vLLM --enable-expert-parallel, --data-parallel-size).

Known values by hand from the catalog configs: weights per GPU (routed experts / EP + the rest / TP), KV per DP
rank, the experts each rank holds (vLLM's linear expert map), the dispatch/combine bytes per backend and their
time over NVLink and across nodes; invariants (TP-only plans unchanged, the simulator's step = the roofline's);
and a table of layouts refused with the message that says why.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.cli import main
from planner.efficiency import BOUND
from planner.errors import ScenarioError
from planner.estimate import step
from planner.estimate.latency import StepTimeModel, estimate_latency
from planner.estimate.memory import plan_memory
from planner.estimate.placement import place
from planner.estimate.roofline import roofline
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.layers import MoE
from planner.model.ops import StepShape
from planner.model.sources import load_config
from planner.scenario import Scenario

DSV3, QWEN235, MIXTRAL, QWEN30, LLAMA8 = (
    "deepseek-ai/DeepSeek-V3",
    "Qwen/Qwen3-235B-A22B",
    "mistralai/Mixtral-8x7B-v0.1",
    "Qwen/Qwen3-30B-A3B",
    "meta-llama/Llama-3.1-8B",
)


def spec(repo: str):
    return build_spec(load_config(repo, prefer="catalog").config, repo)


@pytest.fixture(scope="module")
def dsv3():
    return spec(DSV3)


@pytest.fixture(scope="module")
def qwen235():
    return spec(QWEN235)


def weights(model, **kw) -> int:
    sc = Scenario(gpu=kw.pop("gpu", "h200"), max_model_len=kw.pop("max_model_len", 8192), **kw)
    return plan_memory(model, get_profile(sc.gpu), sc, suggest=False).weight_bytes_per_gpu


# Routed-expert bytes of the whole model, by hand from config.json: MoE layers x E x 3 x h x I_expert x bits / 8.
# DeepSeek-V3: 61 layers, the first 3 dense (first_k_dense_replace), 256 experts of 2048 on h 7168, fp8 with one
# fp32 scale per 128 x 128 block: 8 + 32 / 16384 bits a weight. Qwen3-235B-A22B: 94 MoE layers, 128 experts of
# 1536 on h 4096, bf16. Mixtral-8x7B: 32 layers, 8 experts of 14336 on h 4096, bf16.
DSV3_EXPERT_BYTES = 58 * 256 * 3 * 7168 * 2048 * (8 + 32 / (128 * 128)) / 8
QWEN235_EXPERT_BYTES = 94 * 128 * 3 * 4096 * 1536 * 2
MIXTRAL_EXPERT_BYTES = 32 * 8 * 3 * 4096 * 14336 * 2


def test_hand_expert_bytes_are_the_models_routed_experts(dsv3, qwen235) -> None:
    """The by-hand totals are the catalog specs' expert parameters (so the tests below rest on the config)."""
    for model, total, bits in ((dsv3, DSV3_EXPERT_BYTES, 8 + 32 / 16384), (qwen235, QWEN235_EXPERT_BYTES, 16)):
        params = sum(g.total for g in model.param_groups() if g.component == "experts")
        assert params * bits / 8 == pytest.approx(total, rel=1e-12)


@pytest.mark.parametrize(
    ("repo", "experts_total", "tp", "dp"),
    [(DSV3, DSV3_EXPERT_BYTES, 1, 8), (QWEN235, QWEN235_EXPERT_BYTES, 1, 8), (QWEN235, QWEN235_EXPERT_BYTES, 2, 4)],
)
def test_weights_per_gpu_are_experts_over_ep_plus_the_rest_over_tp(repo, experts_total, tp, dp) -> None:
    """EP 8 = tp x dp: each GPU holds 1/8 of the routed experts whole, and the rest (attention, dense layers,
    shared experts, embedding, lm_head) split over the DP rank's TP group, replicated across DP ranks."""
    model = spec(repo)
    rest_per_gpu = weights(model, tp=tp) - experts_total / tp  # the TP-only plan holds experts / tp too
    ep_weights = weights(model, tp=tp, data_parallel_size=dp, enable_expert_parallel=True)
    assert ep_weights == pytest.approx(rest_per_gpu + experts_total / (tp * dp), abs=4)


@pytest.mark.parametrize("repo", [DSV3, QWEN235])
def test_ep_over_tp_alone_holds_what_tp_holds(repo) -> None:
    """--tp 8 --enable-expert-parallel: 32 (16) whole experts per GPU instead of 1/8 of every expert; the same
    bytes, since 256 and 128 divide by 8."""
    model = spec(repo)
    assert weights(model, tp=8, enable_expert_parallel=True) == pytest.approx(weights(model, tp=8), abs=4)


def test_uneven_experts_the_fullest_rank_and_the_expert_map() -> None:
    """Mixtral's 8 experts over EP 3 (DP 3, TP 1): vLLM's determine_expert_map gives 3, 3, 2 experts, contiguous;
    the memory plan budgets the fullest rank: the rest + 3/8 of the experts."""
    model = spec(MIXTRAL)
    sc = Scenario(gpu="h200", data_parallel_size=3, enable_expert_parallel=True, max_model_len=8192)
    p = place(model, get_profile("h200"), sc)
    assert [r.experts for r in p.ranks] == [(0, 3), (3, 6), (6, 8)]
    assert [r.dp_rank for r in p.ranks] == [0, 1, 2] and [r.ep_rank for r in p.ranks] == [0, 1, 2]
    one_expert = MIXTRAL_EXPERT_BYTES / 8  # 32 layers x 3 x 4096 x 14336 x 2 B
    assert p.ranks[0].weight_bytes == p.ranks[1].weight_bytes
    assert p.ranks[0].weight_bytes - p.ranks[2].weight_bytes == pytest.approx(one_expert, abs=2)
    assert p.weight_bytes_total == sum(r.weight_bytes for r in p.ranks)
    full = weights(model, tp=1)
    assert weights(model, data_parallel_size=3, enable_expert_parallel=True) == pytest.approx(
        full - MIXTRAL_EXPERT_BYTES * (1 - 3 / 8), abs=4
    )


def test_placement_experts_per_rank_at_ep8(dsv3) -> None:
    """DeepSeek-V3 at TP 2 x DP 4: EP rank = dp_rank x tp + tp_rank holds experts [32 r, 32 r + 32); global rank
    = dp_rank x tp + tp_rank too (pp 1); one node of 8, the dispatch over NVLink."""
    sc = Scenario(gpu="h200", tp=2, data_parallel_size=4, enable_expert_parallel=True, max_model_len=8192)
    p = place(dsv3, get_profile("h200"), sc)
    assert (p.ep, p.data_parallel_size, p.ep_link, p.num_nodes, len(p.ranks)) == (8, 4, "nvlink", 1, 8)
    for r in p.ranks:
        assert r.ep_rank == r.dp_rank * 2 + r.tp_rank == r.rank
        assert r.experts == (32 * r.rank, 32 * r.rank + 32)


def test_kv_per_dp_rank(qwen235, dsv3) -> None:
    """Each DP rank holds its own KV cache, its attention TP inside the rank: Qwen3-235B (4 KV heads of 128, 94
    layers, bf16) costs 94 x 2 x 4 x 128 x 2 = 192,512 B a token per GPU at TP 1 x DP 8, half at TP 2 x DP 4. For
    DeepSeek-V3's MLA latent (replicated over TP: 576 x 61 x 2 = 70,272 B a token on every GPU), DP 8 holds 8
    times the distinct tokens TP 8 does, less what the replicated attention weights take."""
    hw = get_profile("h200")
    for tp, dp, per_token in ((1, 8, 94 * 2 * 4 * 128 * 2), (2, 4, 94 * 2 * 2 * 128 * 2)):
        sc = Scenario(gpu="h200", tp=tp, data_parallel_size=dp, enable_expert_parallel=True, max_model_len=8192)
        plan = plan_memory(qwen235, hw, sc, suggest=False)
        assert plan.kv_bytes_per_token_per_gpu == per_token
        p = place(qwen235, hw, sc)
        assert sorted({r.dp_rank for r in p.ranks}) == list(range(dp))
        assert {r.kv_cache_bytes for r in p.ranks} == {plan.num_gpu_blocks * plan.bytes_per_block}
        assert p.kv_cache_bytes_total == 8 * plan.num_gpu_blocks * plan.bytes_per_block
    dp8 = plan_memory(dsv3, hw, Scenario(gpu="h200", data_parallel_size=8, enable_expert_parallel=True), suggest=False)
    tp8 = plan_memory(dsv3, hw, Scenario(gpu="h200", tp=8), suggest=False)
    assert dp8.kv_bytes_per_token_per_gpu == tp8.kv_bytes_per_token_per_gpu == 576 * 61 * 2
    assert 8 * dp8.kv_cache_tokens > 4 * tp8.kv_cache_tokens  # distinct tokens over the 8 GPUs
    assert dp8.kv_cache_bytes_per_gpu < tp8.kv_cache_bytes_per_gpu  # the replicated MLA/dense weights


def _moe_ops(model, **shape):
    layer = next(layer for layer in model.layers if isinstance(layer.ffn, MoE))
    base = {"num_seqs": 64, "query_len": 1, "context_len": 1000, "causal": False}
    return {op.name.split(" (")[0]: op for op in layer.ffn.ops(StepShape(**base, **shape))}


@pytest.mark.parametrize(
    ("backend", "dispatch", "combine"),
    [
        # all-gather of the 64 tokens to the 7 other DP ranks, bf16; reduce-scatter back the same
        ("allgather_reducescatter", 64 * 7 * 7168 * 2, 64 * 7 * 7168 * 2),
        # one copy per routed expert off this rank (8 x 7/8), fp8 + one fp32 scale per 128; combine bf16
        ("deepep_low_latency", 64 * 8 * 7 / 8 * 7168 * (1 + 4 / 128), 64 * 8 * 7 / 8 * 7168 * 2),
        # one copy per distinct remote rank: 7 x (1 - (7/8)^8) under uniform routing
        (
            "deepep_high_throughput",
            64 * 7 * (1 - (7 / 8) ** 8) * 7168 * (1 + 4 / 128),
            64 * 7 * (1 - (7 / 8) ** 8) * 7168 * 2,
        ),
    ],
)
def test_dispatch_and_combine_bytes_by_hand(dsv3, backend, dispatch, combine) -> None:
    ops = _moe_ops(dsv3, ep=8, dp=8, all2all_backend=backend)
    assert ops["ep.dispatch"].comm_bytes == pytest.approx(dispatch, rel=1e-12)
    assert ops["ep.combine"].comm_bytes == pytest.approx(combine, rel=1e-12)


def test_dispatch_is_sequence_parallel_at_tp_above_one(dsv3) -> None:
    """TP 2 x DP 4 (EP 8): vLLM's use_sequence_parallel_moe splits the DP rank's 64 tokens over its 2 TP ranks,
    each gathering over the whole EP group: 32 tokens x 7 peers (all-gather), 32 x 8 x 7/8 copies (DeepEP LL)."""
    gather = _moe_ops(dsv3, tp=2, ep=8, dp=4)
    assert gather["ep.dispatch"].comm_bytes == pytest.approx(32 * 7 * 7168 * 2, rel=1e-12)
    ll = _moe_ops(dsv3, tp=2, ep=8, dp=4, all2all_backend="deepep_low_latency")
    assert ll["ep.dispatch"].comm_bytes == pytest.approx(32 * 8 * 7 / 8 * 7168 * (1 + 4 / 128), rel=1e-12)


def test_expert_gemm_runs_the_pairs_routed_to_the_rank(dsv3) -> None:
    """64 tokens per DP rank x 8 DP ranks, top-8 of 256, 32 experts here, imbalance 1.3: 665.6 pairs on the
    busiest rank, each 3 x 7168 x 2048 multiply-adds (whole experts), over the 32 (all) experts touched."""
    bits = 8 + 32 / 16384
    op = _moe_ops(dsv3, ep=8, dp=8, expert_load_imbalance=1.3, weight_bits={"experts": bits})["moe.experts"]
    pairs = 64 * 8 * 8 * 32 / 256 * 1.3
    assert op.flops == pytest.approx(2 * pairs * 3 * 7168 * 2048, rel=1e-12)
    touched = 32 * (1 - (1 - 8 / 256) ** 512)
    assert op.weight_bytes == pytest.approx(3 * 7168 * 2048 * bits / 8 * touched, rel=1e-12)
    assert op.gemm_m_tokens == round(pairs / touched)


def test_ep_without_dp_has_no_all_to_all_and_keeps_the_tp_allreduce(dsv3) -> None:
    """vLLM's use_all2all_kernels needs dp > 1: at --tp 8 --enable-expert-parallel the MoE output is summed by
    the TP all-reduce, as without EP; the experts' GEMM is whole experts on T k / 8 pairs."""
    r = roofline(dsv3, get_profile("h200"), Scenario(gpu="h200", tp=8, enable_expert_parallel=True), "decode", 64, 1000)
    names = [row.name for row in r.layers]
    assert not any("ep.dispatch" in n or "ep.combine" in n for n in names)
    assert any("tp.allreduce (ffn)" in n for n in names)
    ops = _moe_ops(dsv3, tp=8, ep=8, expert_load_imbalance=1.0)
    assert ops["moe.experts"].flops == pytest.approx(2 * 64 * 8 / 8 * 3 * 7168 * 2048, rel=1e-12)


def _row(r, name: str):
    return next(row for row in r.layers if row.name.endswith(name))


def test_all_to_all_over_nvlink_and_across_nodes_by_hand(dsv3) -> None:
    """At the BOUND factors, one MoE layer's dispatch: NCCL latency by link + payload / one-way bandwidth.
    DP 8 on one H100 node (NVLink 450 GB/s): 12.5 us + 64 x 7 x 7168 x 2 / 450e9; DP 16 over two nodes (the
    network, 50 GB/s a GPU): 46 us + 64 x 15 x 7168 x 2 / 50e9 - the same tokens cost far more across nodes."""
    hw = get_profile("h100-sxm")
    rows = {}
    for dp in (8, 16):
        sc = Scenario(gpu="h100-sxm", data_parallel_size=dp, enable_expert_parallel=True, max_model_len=4096)
        r = roofline(dsv3, hw, sc, "decode", 64, 1000, efficiency=BOUND)
        rows[dp] = _row(r, "ep.dispatch")
        assert place(dsv3, hw, sc).ep_link == ("nvlink" if dp == 8 else "network")
    assert "interconnect-bound (expert dispatch/combine)" in r.verdict  # DP 16: the network binds the step
    assert rows[8].seconds == pytest.approx(12.5e-6 + 64 * 7 * 7168 * 2 / 450e9, rel=1e-12)
    assert rows[16].seconds == pytest.approx(46e-6 + 64 * 15 * 7168 * 2 / 50e9, rel=1e-12)
    per_byte = [rows[dp].seconds / (64 * (dp - 1) * 7168 * 2) for dp in (8, 16)]
    assert per_byte[1] > 4 * per_byte[0]
    nvlink, network = step.Link.for_group(hw, 8), step.Link.for_group(hw, 16)
    assert step.alltoall_seconds(BOUND, 1e6, 16, network) > step.alltoall_seconds(BOUND, 1e6, 8, nvlink)
    assert step.alltoall_seconds(BOUND, 1e6, 1, nvlink) == 0.0


def test_simulator_step_equals_the_roofline_with_ep(dsv3) -> None:
    """One step model: the simulator's StepTimeModel costs a pure-decode EP + DP step as the roofline does."""
    hw = get_profile("h200")
    for kw in ({"data_parallel_size": 8}, {"tp": 8}, {"tp": 2, "data_parallel_size": 4}):
        sc = Scenario(gpu="h200", enable_expert_parallel=True, max_model_len=8192, **kw)
        model = StepTimeModel(dsv3, hw, sc)
        for batch, context in ((1, 200), (48, 3000)):
            assert model.decode_seconds(batch, context) == pytest.approx(
                roofline(dsv3, hw, sc, "decode", batch, context).total_seconds, rel=1e-9
            )


def test_throughput_counts_every_dp_rank(qwen235) -> None:
    """A static batch of B runs on each DP rank: the replica's tokens/s is dp x B x output / E2E, per GPU over
    tp x dp GPUs."""
    hw = get_profile("h200")
    sc = Scenario(gpu="h200", tp=2, data_parallel_size=4, enable_expert_parallel=True, max_model_len=8192)
    lat = estimate_latency(qwen235, hw, sc, batch_size=16, input_len=512, output_len=128)
    assert lat.throughput_tokens_per_s == pytest.approx(4 * 16 * 128 / lat.e2e_seconds, rel=1e-12)
    assert lat.throughput_tokens_per_s_per_gpu == pytest.approx(lat.throughput_tokens_per_s / 8, rel=1e-12)


def test_tp_only_plans_are_unchanged(dsv3) -> None:
    """Without the flags no field appears and no step changes: the scenario's JSON and the roofline of TP 8 are
    those of a scenario that spells the defaults out (golden outputs hold the numbers themselves)."""
    plain = Scenario(gpu="h200", tp=8)
    spelled = Scenario(gpu="h200", tp=8, enable_expert_parallel=False, data_parallel_size=1)
    assert plain.model_dump_json() == spelled.model_dump_json()
    assert "expert" not in plain.model_dump_json() and "data_parallel" not in plain.model_dump_json()
    hw = get_profile("h200")
    a, b = roofline(dsv3, hw, plain, "decode", 32, 2000), roofline(dsv3, hw, spelled, "decode", 32, 2000)
    assert a.total_seconds == b.total_seconds
    assert not any(r.kind == "alltoall" for r in a.layers)
    assert "ep" not in plan_memory(dsv3, hw, plain, suggest=False).resolved.model_dump()


BAD_LAYOUTS = [
    (LLAMA8, {"tp": 2, "enable_expert_parallel": True}, "has no routed experts"),
    (LLAMA8, {"data_parallel_size": 2}, "independent engine"),
    (QWEN30, {"data_parallel_size": 2}, "without --enable-expert-parallel"),
    (QWEN30, {"enable_expert_parallel": True}, "on one GPU"),
    (MIXTRAL, {"data_parallel_size": 16, "enable_expert_parallel": True}, "exceeds the 8 routed experts"),
    (QWEN30, {"data_parallel_size": 2, "pp": 2, "enable_expert_parallel": True}, "with --pp 2"),
    (QWEN30, {"data_parallel_size": 24, "tp": 1, "enable_expert_parallel": True, "num_nodes": 5}, "split evenly"),
]


@pytest.mark.parametrize(("repo", "kw", "message"), BAD_LAYOUTS)
def test_bad_layouts_are_refused(repo, kw, message) -> None:
    model = spec(repo)
    sc = Scenario(gpu="h100-sxm", max_model_len=4096, **kw)
    with pytest.raises(ScenarioError, match=message) as err:
        plan_memory(model, get_profile("h100-sxm"), sc)
    assert err.value.hint  # each refusal says what would make it work


def test_num_gpus_below_the_dp_ranks_is_refused() -> None:
    with pytest.raises(ScenarioError, match=r"--data-parallel-size 8 = 8"):
        Scenario(num_gpus=4, data_parallel_size=8, enable_expert_parallel=True)


def test_cli_plan_json_and_exports(tmp_path: Path, capsys) -> None:
    """The CLI flags reach the plan's placement and the exports (vLLM's and SGLang's flag names)."""
    args = ["--gpu", "h200", "--data-parallel-size", "8", "--enable-expert-parallel", "--max-model-len", "8192"]
    assert main(["plan", DSV3, *args, "--format", "json"]) == 0
    placement = json.loads(capsys.readouterr().out)["placement"]
    assert (placement["ep"], placement["data_parallel_size"], placement["ep_link"]) == (8, 8, "nvlink")
    assert [r["experts"] for r in placement["ranks"]] == [[32 * r, 32 * r + 32] for r in range(8)]
    assert main(["plan", DSV3, *args]) == 0
    text = capsys.readouterr().out
    assert "Experts: EP 8 (1 TP x 8 DP ranks), dispatch over nvlink" in text and "224-255" in text
    assert "--tensor-parallel-size 2" not in text  # 16 GPUs with DP 8: not suggested on an 8-GPU node
    assert (
        main(["export", DSV3, *args, "--target", "all", "--profile", "throughput", "--output-dir", str(tmp_path)]) == 0
    )
    vllm = (tmp_path / "vllm-throughput.sh").read_text()
    assert "--data-parallel-size 8" in vllm and "--enable-expert-parallel" in vllm
    sglang = (tmp_path / "sglang-throughput.sh").read_text()
    assert all(flag in sglang for flag in ("--tp-size 8", "--ep-size 8", "--attn-dp-size 8"))


def test_dp_rank_requests_round_robin_by_hand() -> None:
    """DP rank 0 of 3 gets requests 0, 3, 6, 9 of 10 (arrivals, lengths, classes alike); a closed loop of
    concurrency 10 over 4 ranks runs 2 or 3 per rank: round(10 / 4) = 2 here."""
    from planner.serve.replica import dp_rank_requests
    from planner.serve.workload import RequestSet

    n = np.arange(10)
    reqs = RequestSet(n * 0.5, n + 100, n + 200, None, 0.0, class_id=n % 2, priority=n, shared_prefix_tokens=n * 0)
    share = dp_rank_requests(reqs, 3)
    assert share.arrival_time_s.tolist() == [0.0, 1.5, 3.0, 4.5]
    assert share.input_tokens.tolist() == [100, 103, 106, 109] and share.output_tokens.tolist() == [200, 203, 206, 209]
    assert share.class_id.tolist() == [0, 1, 0, 1] and share.priority.tolist() == [0, 3, 6, 9]
    closed = RequestSet(None, n, n, 10, 0.0)
    assert dp_rank_requests(closed, 4).concurrency == 2 and dp_rank_requests(closed, 1) is closed


def test_simulated_dp_replica_is_rank_zero_times_dp() -> None:
    """Qwen3-30B-A3B on 4 x H100 as TP 1 x DP 4 with EP 4: the simulator runs rank 0 with every 4th of 200
    requests; the replica's throughput is 4 x the rank's, its knee 4 x the rank's, and the label says so."""
    from planner.serve.replica import simulate_scenario
    from planner.serve.workload import FixedLength, PoissonArrivals, Workload

    model, hw = spec(QWEN30), get_profile("h100-sxm")
    sc = Scenario(gpu="h100-sxm", data_parallel_size=4, enable_expert_parallel=True, max_model_len=4096)
    wl = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=8.0),
        num_requests=200,
        input_tokens=FixedLength(tokens=512),
        output_tokens=FixedLength(tokens=64),
        seed=3,
    )
    res = simulate_scenario(model, hw, sc, wl)
    assert (res.data_parallel_ranks, res.num_requests, res.gpus_per_replica) == (4, 50, 4)
    assert res.output_tokens == 50 * 64
    assert res.throughput_tokens_per_s == pytest.approx(4 * res.output_tokens / res.duration_seconds, rel=1e-9)
    assert "DP rank 0 of 4" in res.label
    assert res.saturation_requests_per_s is not None and res.offered_requests_per_s == pytest.approx(8.0, rel=0.3)


def test_slo_search_tries_dp_replicas_at_dp_times_the_rank_knee() -> None:
    """The SLO search's DP candidates: a replica of tp x dp GPUs whose knee is dp x one rank's (each rank takes
    1 / dp of the rate); the rank's knee measured here directly with the same limits and step model."""
    from planner.serve.replica import planned_replica
    from planner.serve.saturation import measure_saturation
    from planner.serve.slo import SLO, CandidateSpace, SearchSettings, plan_slo
    from planner.serve.workload import FixedLength, PoissonArrivals, Workload

    model, hw = spec(QWEN30), get_profile("h100-sxm")
    base = Scenario(gpu="h100-sxm", max_model_len=4096)
    space = CandidateSpace(tp=(1,), data_parallel_size=(2,), enable_expert_parallel=True, base=base)
    assert [(s.tp, s.data_parallel_size, s.enable_expert_parallel) for s in space.scenarios()] == [(1, 2, True)]
    wl = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=20.0),
        num_requests=300,
        input_tokens=FixedLength(tokens=1024),
        output_tokens=FixedLength(tokens=128),
    )
    found = plan_slo(model, SLO.of(p99_tpot=0.1), wl, space, SearchSettings(requests_per_probe=200))
    row = found.candidates[0]
    assert (row.label.split(" w ")[0], row.gpus_per_replica) == ("h100-sxm TP1 DP2 EP", 2)
    sc = space.scenarios()[0]
    scheduler = planned_replica(model, hw, sc)[1]
    n = 3 * 1024
    rank = measure_saturation(np.full(n, 1024), np.full(n, 128), scheduler, StepTimeModel(model, hw, sc), 0.0)
    assert row.saturation_requests_per_s == pytest.approx(2 * rank.requests_per_s, rel=0.02)


def test_a_vllm_log_with_ep_and_dp_reconciles_as_that_layout() -> None:
    """vLLM's 'non-default args' (or the serve command) name --data-parallel-size and --enable-expert-parallel;
    the log reader keeps them and reconcile plans the same layout (the log is one DP rank's engine)."""
    from planner.verify.reconcile import scenario_from_report
    from planner.verify.vllm_log import parse_vllm_log

    line = (
        "INFO 11-02 10:00:00 [utils.py:233] non-default args: {'model': 'Qwen/Qwen3-30B-A3B', "
        "'tensor_parallel_size': 2, 'data_parallel_size': 2, 'enable_expert_parallel': True}\n"
    )
    report = parse_vllm_log("INFO 11-02 10:00:00 [api_server.py:1896] vLLM API server version 0.11.0\n" + line)
    assert (report.tensor_parallel_size, report.data_parallel_size, report.enable_expert_parallel) == (2, 2, True)
    read, _, _ = scenario_from_report(report, spec(QWEN30), get_profile("h100-sxm"))
    assert (read["tp"], read["data_parallel_size"], read["enable_expert_parallel"]) == (2, 2, True)
    command = parse_vllm_log(
        "$ vllm serve Qwen/Qwen3-30B-A3B -tp 2 -dp 4 --enable-expert-parallel\n"
        "INFO 11-02 10:00:05 [gpu_worker.py:298] Available KV cache memory: 40.10 GiB\n"
    )
    assert (command.tensor_parallel_size, command.data_parallel_size, command.enable_expert_parallel) == (2, 4, True)


def test_a_dense_draft_model_runs_in_each_dp_rank_without_ep() -> None:
    """Speculative decoding with a draft model under DP x EP: the drafter is one DP rank's dense model (vLLM builds
    it per engine), so its scenario drops EP and DP; the estimate runs, and at batch 16 a token costs less than
    on one GPU: each GPU streams half the experts (the MoE layers serve both ranks' 32 tokens), which outweighs
    the dispatch and combine over NVLink."""
    from planner.estimate.speculative import draft_scenario
    from planner.scenario import SpeculativeDecoding

    model, draft, hw = spec(QWEN30), spec("Qwen/Qwen3-0.6B"), get_profile("h100-sxm")
    spec_cfg = SpeculativeDecoding(
        method="draft", num_speculative_tokens=3, acceptance_rate=0.7, draft_model="Qwen/Qwen3-0.6B"
    )
    tpot = {}
    for dp in (1, 2):
        extra = {"data_parallel_size": dp, "enable_expert_parallel": True} if dp > 1 else {}
        sc = Scenario(gpu="h100-sxm", max_model_len=4096, speculative=spec_cfg, **extra)
        d = draft_scenario(sc)
        assert (d.data_parallel_size, d.enable_expert_parallel, d.speculative) == (1, False, None)
        tpot[dp] = estimate_latency(model, hw, sc, batch_size=16, draft_model=draft).tpot_seconds
    assert tpot[2] < tpot[1]


def test_deepep_buffers_and_the_low_latency_token_budget(dsv3) -> None:
    """vLLM with DeepEP under DP: the NVLink buffer (VLLM_DEEPEP_BUFFER_SIZE_MB 1024), the high-throughput kernels'
    RDMA buffer across nodes, and the low-latency kernels' RDMA buffer by DeepEP's LowLatencyLayout, for the 256-token
    budget vLLM defaults to with them (use_batched_dp_moe): DeepSeek-V3 (h 7168, E 256): messages 16 + 2 x 7168 =
    14,352 B (dispatch) and 4 x 56 + 2 x 7168 = 14,560 B (combine); two sends and two receives of 256 x 256 x 14,560 B
    and two signal buffers of 256 x 8 + 32 x 4 = 2,176 B. All of it is non-torch memory in the plan."""
    hw = get_profile("h200")

    def plan(backend: str, dp: int):
        sc = Scenario(gpu="h200", data_parallel_size=dp, enable_expert_parallel=True, all2all_backend=backend)
        return plan_memory(dsv3, hw, sc.model_copy(update={"max_model_len": 32768}), suggest=False)

    gather, ll, ht8, ht16 = (
        plan(b, dp)
        for b, dp in (
            ("allgather_reducescatter", 8),
            ("deepep_low_latency", 8),
            ("deepep_high_throughput", 8),
            ("deepep_high_throughput", 16),
        )
    )
    assert gather.all2all_buffer_bytes_per_gpu is None and gather.resolved.max_num_batched_tokens == 8192
    assert ll.resolved.max_num_batched_tokens == 256 and ll.resolved.max_num_seqs == 256
    assert ll.all2all_buffer_bytes_per_gpu == 2**30 + 2 * (2 * 256 * 256 * 14560 + 2176)
    assert ll.non_torch_bytes_per_gpu == gather.non_torch_bytes_per_gpu + ll.all2all_buffer_bytes_per_gpu
    assert (ht8.all2all_buffer_bytes_per_gpu, ht16.all2all_buffer_bytes_per_gpu) == (2**30, 2 * 2**30)
