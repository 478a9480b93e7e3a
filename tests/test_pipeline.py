"""Pipeline parallelism in time, and multi-node placement (planner.estimate.placement, step.pipeline_seconds).

Known values by hand (vLLM's layer split, KV bytes per token, activation-send bytes), the pipeline's
arithmetic (one micro-batch crosses the stages in turn: bubble (pp - 1) / pp; pp in flight: the slowest
stage paces them), the links (a boundary across nodes pays the network), and a table of refused layouts.
"""

from __future__ import annotations

import json
import math

import pytest

from planner.cli import main
from planner.efficiency import BOUND
from planner.errors import ScenarioError
from planner.estimate import step
from planner.estimate.latency import StepTimeModel, decode_context_len, estimate_latency
from planner.estimate.memory import plan_memory, stage_layers
from planner.estimate.placement import place, stage_links
from planner.estimate.roofline import efficiency_for, roofline
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import RequestShape, Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.workload import FixedLength, PoissonArrivals, Workload

LLAMA_70B = "meta-llama/Llama-3.1-70B"


@pytest.fixture(scope="module")
def llama70b():
    return build_spec(load_config(LLAMA_70B, prefer="catalog").config, LLAMA_70B)


@pytest.fixture(scope="module")
def h100():
    return get_profile("h100-sxm")


def scenario(tp: int, pp: int, batch: int = 1, **kw) -> Scenario:
    shape = RequestShape(batch_size=batch, input_len=1024, output_len=256)
    return Scenario(tp=tp, pp=pp, max_model_len=8192, workload=shape, **kw)


# ----------------------------------------------------------------------------- placement


def test_vllm_layer_split_by_hand() -> None:
    """get_pp_indices (vllm/distributed/utils.py): L // pp each, the remainder one each to the stages
    counted back from the second-to-last; vLLM's own test case 4,6,6,4 needs the env override, the
    default for 20 layers at pp 4 is 5 each."""
    assert [(r.start, r.stop) for r in stage_layers(80, 2)] == [(0, 40), (40, 80)]
    assert [(r.start, r.stop) for r in stage_layers(80, 4)] == [(0, 20), (20, 40), (40, 60), (60, 80)]
    assert [len(r) for r in stage_layers(20, 4)] == [5, 5, 5, 5]
    assert [len(r) for r in stage_layers(32, 3)] == [11, 11, 10]  # 32 = 3 x 10 + 2 -> stages 1 and 0 get one
    assert [len(r) for r in stage_layers(81, 4)] == [20, 20, 21, 20]  # one left: the second-to-last


@pytest.mark.parametrize("pp", [2, 4])
def test_llama70b_placement_follows_vllm(llama70b, h100, pp: int) -> None:
    tp = 4
    p = place(llama70b, h100, scenario(tp, pp))
    per_stage = 80 // pp
    assert [(s.layer_start, s.layer_stop) for s in p.stages] == [
        (k * per_stage, (k + 1) * per_stage) for k in range(pp)
    ]
    # stage-major ranks (rank = stage x tp + tp_rank), nodes of 8 filled in order
    assert [(r.rank, r.stage, r.tp_rank, r.node) for r in p.ranks] == [
        (k * tp + j, k, j, (k * tp + j) // 8) for k in range(pp) for j in range(tp)
    ]
    assert p.num_nodes == math.ceil(tp * pp / 8)
    assert [r.holds_embedding for r in p.ranks] == [r.stage == 0 for r in p.ranks]
    assert [r.holds_lm_head for r in p.ranks] == [r.stage == pp - 1 for r in p.ranks]


@pytest.mark.parametrize("tp,pp", [(4, 2), (2, 4), (4, 4), (8, 2)])
def test_bytes_per_rank_sum_to_the_plan(llama70b, h100, tp: int, pp: int) -> None:
    sc = scenario(tp, pp)
    p, plan = place(llama70b, h100, sc), plan_memory(llama70b, h100, sc, suggest=False)
    assert p.weight_bytes_total == plan.weight_bytes_total
    assert max(r.weight_bytes for r in p.ranks) == plan.weight_bytes_per_gpu
    # KV per token by hand: 80 layers x (K, V) x 8 KV heads x 128 x 2 bytes, split over every rank
    assert sum(r.kv_bytes_per_token for r in p.ranks) == 80 * 2 * 8 * 128 * 2 == 327_680
    assert {r.kv_bytes_per_token for r in p.ranks} == {(80 // pp) * 2 * (8 // tp) * 128 * 2}
    # every rank allocates the plan's blocks of its own block size (uniform layers: the plan's KV term)
    kv_term = next(t.bytes for t in plan.terms if t.name == "kv_cache")
    assert p.kv_cache_bytes_total == tp * pp * kv_term
    assert all(r.kv_cache_bytes == plan.num_gpu_blocks * plan.bytes_per_block for r in p.ranks)


def test_stage_boundaries_across_nodes_use_the_network(h100) -> None:
    assert [link.kind for link in stage_links(h100, Scenario(tp=4, pp=2))] == ["nvlink"]
    assert [link.kind for link in stage_links(h100, Scenario(tp=8, pp=2))] == ["network"]
    assert [link.kind for link in stage_links(h100, Scenario(tp=4, pp=4))] == ["nvlink", "network", "nvlink"]
    gb200 = get_profile("gb200")  # 4 GPUs per tray, 72 in one NVLink domain: two trays still talk NVLink
    assert [link.kind for link in stage_links(gb200, Scenario(tp=4, pp=2))] == ["nvlink"]


def refuse_cases(h100):
    six = h100.model_copy(update={"gpus_per_node": 6})  # a 6-GPU server
    return [
        (h100, {"tp": 1, "pp": 81}, "--pp 81 exceeds the 80 layers", "Use --pp 80 or less"),
        (h100, {"tp": 8, "pp": 2, "num_nodes": 1}, "hold 8", "Use --num-nodes 2"),
        (h100, {"tp": 8, "pp": 4, "num_nodes": 3}, "hold 24", "Use --num-nodes 4"),
        (h100, {"tp": 4, "pp": 2, "num_nodes": 3}, "do not split evenly over --num-nodes 3", "e.g. 2"),
        (h100, {"tp": 4, "pp": 3, "num_nodes": 2}, "2 nodes of 6 GPUs each cut a stage's TP group", "--num-nodes 3"),
        (h100, {"tp": 8, "pp": 1, "num_nodes": 2}, "2 nodes of 4 GPUs each cut", "--num-nodes 1"),
        (six, {"tp": 8, "pp": 3, "num_nodes": 4}, "not a whole number of them", "Use --tp 6"),
    ]


def test_bad_layouts_are_refused_with_the_fix(llama70b, h100) -> None:
    for hw, fields, message, fix in refuse_cases(h100):
        with pytest.raises(ScenarioError, match=message) as err:
            place(llama70b, hw, Scenario(max_model_len=8192, **fields))
        assert fix in (err.value.hint or ""), (fields, err.value.hint)


def test_speculative_decoding_with_pp_is_refused(llama70b, h100) -> None:
    from planner.scenario import SpeculativeDecoding

    spec = SpeculativeDecoding(method="ngram", num_speculative_tokens=3, acceptance_rate=0.7)
    with pytest.raises(ScenarioError, match="speculative decoding with --pp 2") as err:
        estimate_latency(llama70b, h100, scenario(4, 2, speculative=spec))
    assert "--pp 1" in (err.value.hint or "")
    assert estimate_latency(llama70b, h100, scenario(4, 1, speculative=spec)).speculative is not None


def test_the_default_node_count_keeps_tp_groups_whole(llama70b, h100) -> None:
    """Without --num-nodes: the fewest nodes in equal pods that cut no TP group."""
    assert place(llama70b, h100, scenario(8, 2)).num_nodes == 2
    twelve = place(llama70b, h100, scenario(4, 3))  # 2 nodes of 6 would cut stage 1: 3 nodes of 4
    assert (twelve.num_nodes, twelve.gpus_per_pod) == (3, 4)
    assert [s.nodes for s in twelve.stages] == [[0], [1], [2]]
    assert [s.send_link for s in twelve.stages] == ["network", "network", None]
    spread = place(llama70b, h100, scenario(4, 2, num_nodes=2))  # allowed: one stage per node
    assert [s.send_link for s in spread.stages] == ["network", None]


# ----------------------------------------------------------------------------- the send and the pipeline


def test_activation_send_by_hand() -> None:
    """Hidden state + residual of 64 tokens of hidden 8192 in bf16: 2 MiB; each of 4 TP ranks sends a
    quarter over the 50 GB/s network, the receiving stage all-gathers over NVLink (450 GB/s one way)."""
    network, nvlink = step.Link("network", 50e9), step.Link("nvlink", 450e9)
    payload = 2 * 64 * 8192 * 2
    assert payload == 2 * 1024 * 1024
    by_hand = (46e-6 + payload / 4 / 50e9) + (12.5e-6 + 0.75 * payload / 450e9)
    assert step.activation_send_seconds(BOUND, 64, 8192, 2, 4, network, nvlink) == pytest.approx(by_hand, rel=1e-12)
    assert step.activation_send_seconds(BOUND, 64, 8192, 2, 1, nvlink, nvlink) == pytest.approx(
        12.5e-6 + payload / 450e9, rel=1e-12
    )


def test_pipeline_arithmetic_by_hand() -> None:
    one = step.pipeline_seconds([0.010, 0.010], [0.0001], in_flight=1)
    assert one.latency_seconds == one.interval_seconds == one.period_seconds == pytest.approx(0.0201)
    assert one.bubble_fraction == pytest.approx(1 - 0.020 / (2 * 0.0201))
    two = step.pipeline_seconds([0.010, 0.010], [0.0001], in_flight=2)
    assert two.interval_seconds == pytest.approx(0.01005) and two.period_seconds == pytest.approx(0.0201)
    assert two.seconds_for(8) == pytest.approx(0.0201 + 7 * 0.01005)
    slow_last = step.pipeline_seconds([0.004, 0.010], [0.0001], in_flight=2)
    assert slow_last.interval_seconds == 0.010  # the slowest stage paces the batches
    # one stage is combine_step: max(gpu, host) with async scheduling, gpu + host without
    assert step.pipeline_seconds([0.01], [], 1, 0.004).period_seconds == 0.01
    assert step.pipeline_seconds([0.01], [], 1, 0.004, async_scheduling=False).period_seconds == pytest.approx(0.014)


def test_roofline_shows_each_stage_and_its_send(llama70b, h100) -> None:
    one = roofline(llama70b, h100, scenario(4, 1), "decode", 16, 2048)
    two = roofline(llama70b, h100, scenario(4, 2), "decode", 16, 2048)
    assert one.pipeline is None and len(two.pipeline) == 2
    first, last = two.pipeline
    assert (first.layer_start, first.layer_stop, last.layer_start, last.layer_stop) == (0, 40, 40, 80)
    assert first.send_link == "nvlink" and last.send_link is None and last.send_seconds == 0.0
    eff = efficiency_for(h100, sc=scenario(4, 2))
    nvlink = step.Link.for_group(h100, 4)
    assert first.send_seconds == pytest.approx(
        float(step.activation_send_seconds(eff, 16, 8192, 2, 4, nvlink, nvlink)), rel=1e-12
    )
    # the same layer work split in two: the stages sum to the one-stage step within launch/tail effects
    assert sum(s.gpu_seconds for s in two.pipeline) == pytest.approx(one.total_seconds, rel=0.02)
    assert two.total_seconds == pytest.approx(sum(s.gpu_seconds + s.send_seconds for s in two.pipeline), rel=1e-9)
    assert any(r.name.startswith("pipeline / activation send stage 0 -> 1") for r in two.layers)


def test_a_send_across_nodes_pays_the_network(llama70b, h100) -> None:
    """TP 8 x PP 2 on H100 servers of 8: the boundary crosses nodes, so each rank's eighth of the
    activations goes over its 400 Gb/s port (5e10 B/s) after NCCL's 46 us, the all-gather over NVLink."""
    sc = scenario(8, 2)
    eff = efficiency_for(h100, sc=sc)
    first = roofline(llama70b, h100, sc, "decode", 64, 2048).pipeline[0]
    payload = 2 * 64 * 8192 * 2
    nvlink = h100.unidirectional_interconnect_bytes_per_s
    f = eff.allreduce_fraction
    by_hand = 46e-6 + payload / 8 / (5e10 * f) + 12.5e-6 + 7 / 8 * payload / (nvlink * f)
    assert first.send_link == "network" and first.send_seconds == pytest.approx(by_hand, rel=1e-12)
    inside = roofline(llama70b, h100, scenario(4, 2), "decode", 64, 2048).pipeline[0]
    assert inside.send_link == "nvlink" and inside.send_seconds < first.send_seconds
    # and the latency estimate carries it: one request on TP 8 x PP 2 pays the network send once per token
    est = estimate_latency(llama70b, h100, sc)
    assert est.pipeline.decode_send_seconds[0] > 46e-6


# ----------------------------------------------------------------------------- latency and the simulator


def test_batch_one_pays_every_stage_and_the_sends(llama70b, h100) -> None:
    """One request: one micro-batch crosses the stages in turn, so TPOT is the whole model's work plus the
    sends (not less: pp does not speed up one token), and the stages idle (pp - 1) / pp of the time."""
    base = estimate_latency(llama70b, h100, scenario(4, 1))
    for pp in (2, 4):
        est = estimate_latency(llama70b, h100, scenario(4, pp))
        pipe = est.pipeline
        assert pipe.in_flight_batches == 1 and pipe.micro_batch_size == 1
        assert est.tpot_seconds == pytest.approx(sum(pipe.decode_stage_seconds) + sum(pipe.decode_send_seconds))
        assert est.tpot_seconds >= base.tpot_seconds
        assert est.tpot_seconds == pytest.approx(base.tpot_seconds + sum(pipe.decode_send_seconds), rel=0.02)
        assert est.pipeline_bubble_fraction == pytest.approx((pp - 1) / pp, abs=0.01)
        assert est.ttft_seconds >= base.ttft_seconds  # one prefill chunk crosses the stages one after another
    assert base.pipeline is None and base.pipeline_bubble_fraction is None
    assert "pipeline_bubble_fraction" not in base.model_dump()  # pp 1 output unchanged


def test_high_load_is_paced_by_the_slowest_stage(llama70b, h100) -> None:
    """256 sequences on pp 2: two micro-batches of 128 in flight; one leaves the last stage per slowest
    stage time, so decode throughput is 2 micro-batches per 2 slowest-stage times: about twice what one
    stage-pair (the whole model on one micro-batch, pp 1) gives at that micro-batch."""
    est = estimate_latency(llama70b, h100, scenario(4, 2, batch=256))
    pipe = est.pipeline
    assert pipe.in_flight_batches == 2 and pipe.micro_batch_size == 128
    assert pipe.decode_interval_seconds == max(pipe.decode_stage_seconds)
    assert est.tpot_seconds == pytest.approx(2 * max(pipe.decode_stage_seconds))
    assert est.pipeline_bubble_fraction < 0.05
    pp1_micro = estimate_latency(llama70b, h100, scenario(4, 1, batch=128))
    decode_rate_pp2 = 256 / est.tpot_seconds
    decode_rate_one_stage_pair = 128 / pp1_micro.tpot_seconds
    assert decode_rate_pp2 / decode_rate_one_stage_pair == pytest.approx(2.0, rel=0.05)


def test_long_prefill_chunks_overlap_across_stages(llama70b, h100) -> None:
    """64 prompts of 1,024 tokens = 8 chunks of 8,192: they flow through 2 stages back to back, so the
    prefill takes (8 + 1) / 8 / 2 of the one-stage time, plus sends: TTFT drops with pp."""
    one = estimate_latency(llama70b, h100, scenario(4, 1, batch=64))
    two = estimate_latency(llama70b, h100, scenario(4, 2, batch=64))
    assert two.pipeline.prefill_chunks == one.prefill_steps == 8
    assert two.ttft_seconds < one.ttft_seconds
    assert two.ttft_seconds == pytest.approx(one.ttft_seconds * 9 / 16, rel=0.05)


def test_the_simulator_prices_steps_like_the_estimate(llama70b, h100) -> None:
    """StepTimeModel (the simulator's step) and estimate_latency call the same pipeline: equal TPOT."""
    context = decode_context_len(1024, 256)
    for tp, pp, batch in [(4, 2, 1), (4, 2, 7), (4, 4, 64), (8, 2, 256)]:
        sc = scenario(tp, pp, batch=batch)
        est = estimate_latency(llama70b, h100, sc)
        model = StepTimeModel(llama70b, h100, sc)
        assert model.decode_seconds(batch, context) == pytest.approx(est.tpot_seconds, rel=1e-12)
        assert list(model.decode_seconds([batch, batch], [context, context])) == pytest.approx([est.tpot_seconds] * 2)


def test_a_lone_chunk_is_not_cut_across_micro_batches(llama70b, h100) -> None:
    """One 1,024-token chunk beside one decode on pp 2: the chunk crosses both stages whole, so the step
    lasts at least as long as the chunk alone on pp 1 would (less its last-stage-only extras)."""
    pp1, pp2 = StepTimeModel(llama70b, h100, scenario(4, 1)), StepTimeModel(llama70b, h100, scenario(4, 2))
    mix = {
        "prefill_tokens": 1024,
        "prefill_attention_pairs": 1024 * 1025 / 2,
        "decode_seqs": 1,
        "decode_kv_tokens": 1500,
    }
    assert pp2.step_seconds(**mix) >= 0.98 * pp1.step_seconds(**mix)


def test_simulated_pp2_serves_more_at_high_load_and_no_faster_at_low(llama70b, h100) -> None:
    def run(pp: int, rate: float):
        wl = Workload(
            arrivals=PoissonArrivals(request_rate_per_s=rate),
            num_requests=60,
            input_tokens=FixedLength(tokens=512),
            output_tokens=FixedLength(tokens=64),
            seed=0,
        )
        return simulate_scenario(llama70b, h100, scenario(4, pp), wl)

    lone1, lone2 = run(1, 0.02), run(2, 0.02)  # one request at a time
    assert lone2.tpot_seconds.mean >= lone1.tpot_seconds.mean
    assert lone2.tpot_seconds.mean == pytest.approx(lone1.tpot_seconds.mean, rel=0.03)
    assert lone2.saturation_requests_per_s > lone1.saturation_requests_per_s


# ----------------------------------------------------------------------------- the command line


def test_the_export_uses_the_placement_nodes(llama70b, h100) -> None:
    from planner.deploy.export import deployment

    dep, _ = deployment(llama70b, h100, scenario(4, 3))
    assert (dep.nodes_per_replica, dep.gpus_per_pod, dep.multi_node) == (3, 4, True)
    dep, _ = deployment(llama70b, h100, scenario(4, 2, num_nodes=2))
    assert (dep.nodes_per_replica, dep.gpus_per_pod) == (2, 4)
    dep, _ = deployment(llama70b, h100, scenario(4, 2))
    assert (dep.nodes_per_replica, dep.gpus_per_pod, dep.multi_node) == (1, 8, False)


def test_plan_json_has_the_placement_and_the_table_shows_nodes(capsys) -> None:
    code = main(
        ["plan", LLAMA_70B, "--tp", "8", "--pp", "2", "--num-nodes", "2", "--max-model-len", "8192", "--format", "json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert len(out["placement"]["ranks"]) == 16 and out["placement"]["num_nodes"] == 2
    assert [s["send_link"] for s in out["placement"]["stages"]] == ["network", None]
    code = main(["plan", LLAMA_70B, "--tp", "8", "--pp", "2", "--max-model-len", "8192"])
    text = capsys.readouterr().out
    assert code == 0 and "2 node(s) of 8" in text and "Placement: 16 GPUs on 2 node(s)" in text


def test_cli_refuses_a_layout_that_does_not_fit_its_nodes(capsys) -> None:
    code = main(["plan", LLAMA_70B, "--tp", "8", "--pp", "2", "--num-nodes", "1", "--max-model-len", "8192"])
    err = capsys.readouterr().err
    assert code == 2 and "--num-nodes 1" in err and "Use --num-nodes 2" in err


def test_latency_json_reports_the_bubble(capsys) -> None:
    code = main(["latency", LLAMA_70B, "--tp", "4", "--pp", "2", "--max-model-len", "8192", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and 0.0 <= out["pipeline_bubble_fraction"] < 1.0
    assert len(out["pipeline"]["decode_stage_seconds"]) == 2
