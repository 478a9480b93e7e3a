"""The one step-cost model (planner.estimate.step): every caller agrees op by op, and the physics holds.

The roofline (``roofline``), the simulator's ``StepTimeModel`` (scalar and array forms), the
public-record ``StepOps``/``StepOpsBatch`` and the sweep all bind ops through
``planner.estimate.step``; these tests check they give the same seconds to the last digits, and
the invariants the serving-accuracy issue names.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from planner.estimate import step
from planner.estimate.latency import StepTimeModel
from planner.estimate.roofline import roofline
from planner.estimate.sweep import sweep
from planner.hardware import get_profile, load_profiles
from planner.scenario import Scenario
from planner.verify.public_records import catalog_model
from planner.verify.public_records_predict import StepOps, StepOpsBatch

CASES = [  # dense GQA, MHA, MoE, MLA (prefill and decode differ), sliding windows, hybrid Mamba, MXFP4 MoE
    ("meta-llama/Llama-3.1-70B", 4, "cuda-graphs"),
    ("meta-llama/Llama-2-7b-hf", 1, "eager"),
    ("mistralai/Mixtral-8x7B-v0.1", 2, "cuda-graphs"),
    ("deepseek-ai/DeepSeek-V2-Lite", 1, "cuda-graphs"),
    ("google/gemma-2-9b", 2, "eager"),
    ("ai21labs/AI21-Jamba-1.5-Mini", 2, "cuda-graphs"),
    ("openai/gpt-oss-20b", 1, "cuda-graphs"),
    # chunked local attention: vLLM V1 decodes it with piecewise graphs (tests/test_graph_fallback.py)
    ("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", 2, "cuda-graphs"),
]
DECODES = [(1, 128), (13, 3000), (64, 8192), (600, 1000)]


@pytest.mark.parametrize("repo,tp,engine", CASES)
def test_every_form_of_the_step_cost_agrees_with_the_roofline(repo, tp, engine):
    model, hw = catalog_model(repo), get_profile("h100-sxm")
    sc = Scenario(tp=tp, engine=engine)
    stm = StepTimeModel(model, hw, sc)
    ref = np.asarray([roofline(model, hw, sc, "decode", b, c).total_seconds for b, c in DECODES])
    scalar = np.asarray(
        [
            stm.step_seconds(prefill_tokens=0, prefill_attention_pairs=0, decode_seqs=b, decode_kv_tokens=b * c)
            for b, c in DECODES
        ]
    )
    arrays = stm.decode_seconds(np.asarray([b for b, _ in DECODES]), np.asarray([c for _, c in DECODES]))
    works = [StepOps(model, hw, sc, "decode", b, c) for b, c in DECODES]
    eff = stm.eff
    batched = StepOpsBatch(works).prime(eff)
    single = np.asarray([StepOps(model, hw, sc, "decode", b, c).seconds(eff) for b, c in DECODES])
    for got in (scalar, arrays, batched, single):
        np.testing.assert_allclose(got, ref, rtol=1e-9)
    for q in (300, 4096):
        pre = stm.step_seconds(
            prefill_tokens=q, prefill_attention_pairs=q * (q + 1) / 2, decode_seqs=0, decode_kv_tokens=0
        )
        assert pre == pytest.approx(roofline(model, hw, sc, "prefill", 1, q).total_seconds, rel=1e-9)


def test_the_sweep_is_the_step_model():
    model = catalog_model("meta-llama/Llama-3.1-8B")
    gpus = [get_profile("h100-sxm"), get_profile("l40s")]
    result = sweep({"8b": model}, gpus, [1, 2], ["auto"], [1, 16, 128], [512, 4096])
    for i in range(len(result)):
        hw = get_profile(result.gpu[i])
        sc = Scenario(gpu=hw.id, tp=int(result.tp[i]))
        ref = roofline(model, hw, sc, "decode", int(result.batch[i]), int(result.context_len[i])).total_seconds
        assert result.tpot_seconds[i] == pytest.approx(ref, rel=1e-9)


def test_the_sweep_is_each_cards_step_model_to_the_last_bit():
    """The sweep evaluates each (model, TP, dtype)'s op rows once and binds them on every card
    (``StepTimeModel.decode_grid`` / ``decode_on``): every card's slice equals that card's own
    ``StepTimeModel.decode_seconds`` over the grid, and random points equal it over a random handful of
    points, bit for bit. (Each handful keeps batches 1 and 600 beside the point: numpy sums one point's
    op rows in pairwise order, several points' row by row, so a lone point may differ in the last bits,
    which the rel=1e-9 tests above allow.)"""
    names = ["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B", "google/gemma-2-9b", "deepseek-ai/DeepSeek-V2-Lite"]
    models = {n: catalog_model(n) for n in names}
    gpus = [hw for hw in load_profiles().values() if hw.kind == "gpu"]
    batches, contexts = [1, 3, 7, 64, 300, 600], [512, 3000, 9000]
    result = sweep(models, gpus, [1, 2, 8], ["auto", "fp8"], batches, contexts)
    B, C = (a.ravel() for a in np.meshgrid(np.asarray(batches, float), np.asarray(contexts, float), indexing="ij"))
    n, rng = len(B), random.Random(0)

    def card_model(i: int) -> StepTimeModel:
        hw = get_profile(result.gpu[i])
        sc = Scenario(gpu=hw.id, tp=int(result.tp[i]), weight_dtype=result.weight_dtype[i])
        return StepTimeModel(models[result.model[i]], hw, sc)

    for start in rng.sample(range(0, len(result), n), 40):
        got = result.tpot_seconds[start : start + n]
        assert got.tobytes() == card_model(start).decode_seconds(B, C).tobytes(), (result.gpu[start], start)
    for i in rng.sample(range(len(result)), 200):
        k = rng.sample(range(n), 3)
        batch = np.r_[result.batch[i], 1.0, 600.0, B[k]]
        context = np.r_[result.context_len[i], C[k][0], C[k][1], C[k]]
        assert card_model(i).decode_seconds(batch, context)[0] == result.tpot_seconds[i], i


def test_tp2_over_nvlink_decodes_70b_faster_than_tp1_at_batch_1():
    model, hw = catalog_model("meta-llama/Llama-3.1-70B"), get_profile("h200")
    tp1 = roofline(model, hw, Scenario(gpu="h200", tp=1), "decode", 1, 1024).total_seconds
    tp2 = roofline(model, hw, Scenario(gpu="h200", tp=2), "decode", 1, 1024).total_seconds
    assert tp2 < 0.65 * tp1


def test_pcie_only_tensor_parallel_costs_more_than_nvlink():
    model, nvlink = catalog_model("meta-llama/Llama-3.1-70B"), get_profile("h100-sxm")
    pcie = nvlink.model_copy(update={"interconnect_kind": "pcie5", "interconnect_bandwidth_bytes_per_s": 128e9})
    for tp in (2, 4, 8):
        sc = Scenario(tp=tp)
        for stage, batch, seq in (("decode", 8, 2048), ("prefill", 1, 4096)):
            fast = roofline(model, nvlink, sc, stage, batch, seq).seconds_by_bound["interconnect"]
            slow = roofline(model, pcie, sc, stage, batch, seq).seconds_by_bound["interconnect"]
            assert slow > fast, (tp, stage)


def test_tensor_parallel_across_nodes_pays_the_network():
    hw = get_profile("h100-sxm")
    inside = step.Link.for_group(hw, 8)
    across = step.Link.for_group(hw, 16)
    assert (inside.kind, across.kind) == ("nvlink", "network")
    eff = StepTimeModel(catalog_model("meta-llama/Llama-3.1-8B"), hw, Scenario()).eff
    for payload in (64e3, 16e6):
        assert step.allreduce_seconds(eff, payload, 16, across, True) > step.allreduce_seconds(
            eff, payload, 8, inside, True
        )


def test_custom_allreduce_takes_small_messages_and_nccl_large_ones():
    hw = get_profile("h100-sxm")
    link = step.Link.for_group(hw, 4)
    assert step.custom_allreduce_applies(256 * 1024, 4, link, True)
    assert not step.custom_allreduce_applies(16 * 2**20, 4, link, True)
    pcie = step.Link("pcie", 25e9)
    assert step.custom_allreduce_applies(1024, 2, pcie, True) and not step.custom_allreduce_applies(1024, 4, pcie, True)
    # The published vLLM custom all-reduce figure the fit reproduces: TP4, 256 KiB, 20.6 us measured (eager).
    eff = StepTimeModel(catalog_model("meta-llama/Llama-3.1-8B"), hw, Scenario()).eff
    assert step.allreduce_seconds(eff, 256 * 1024, 4, link, True) == pytest.approx(17.6e-6, rel=0.05)


def test_allreduce_for_one_payload_equals_its_array_form_element_by_element():
    """allreduce_seconds runs plain Python on one payload and numpy on arrays: one formula, equal on every case
    (NVLink / PCIe / network, 2-8 ranks, custom on or off, in a graph or not, both sides of 1 MiB and 8 MiB)."""
    hw = get_profile("h100-sxm")
    eff = StepTimeModel(catalog_model("meta-llama/Llama-3.1-8B"), hw, Scenario()).eff
    payloads = np.array([512.0, 64e3, 256 * 1024, 2**20, 3 * 2**20, 8 * 2**20, 64 * 2**20])
    links = (step.Link.for_group(hw, 8), step.Link("pcie", 25e9), step.Link.for_group(hw, 16))
    for link in links:
        for ranks in (2, 4, 8):
            for custom in (True, False):
                for fit in (True, False):
                    for graph in (True, False):
                        array = step.allreduce_seconds(eff, payloads, ranks, link, custom, np.full(7, graph), fit)
                        one = [step.allreduce_seconds(eff, float(p), ranks, link, custom, graph, fit) for p in payloads]
                        assert all(isinstance(t, float) for t in one)
                        assert array.tolist() == one, (link.kind, ranks, custom, fit, graph)


def test_modern_vllm_decode_at_batch_1_is_near_the_memory_bound():
    """8B on H100, vLLM V1 with async scheduling: a batch-1 decode step within [1.0, 1.4] x bytes / bandwidth."""
    model, hw = catalog_model("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm")
    r = roofline(model, hw, Scenario(engine_version="vllm@0.15.1"), "decode", 1, 512)
    pure = r.total_bytes / hw.hbm_bandwidth_bytes_per_s
    assert 1.0 <= r.total_seconds / pure <= 1.4


def test_async_scheduling_hides_host_work_a_synchronous_engine_pays():
    model, hw = catalog_model("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm")
    asynchronous = StepTimeModel(model, hw, Scenario(engine_version="vllm@0.15.1"))
    synchronous = StepTimeModel(model, hw, Scenario(engine_version="vllm@0.11.0"), efficiency=asynchronous.eff)
    a = asynchronous.decode_seconds(32, 1024)
    s = synchronous.decode_seconds(32, 1024)
    assert s == pytest.approx(a + float(step.host_seconds(asynchronous.eff, 32)), rel=1e-9)


def test_cuda_graph_batches_pad_to_the_captured_size():
    assert [step.graph_padded_batch(b, 512) for b in (1, 2, 3, 13, 250, 300, 512, 600)] == [
        1,
        2,
        4,
        16,
        256,
        304,
        512,
        600,
    ]
    np.testing.assert_array_equal(step.graph_padded_batch(np.asarray([3.0, 13.0, 600.0]), 512), [4.0, 16.0, 600.0])


@pytest.mark.parametrize(
    ("ranks", "mib", "measured_us"),
    [(4, 0.5, 10.0), (4, 1.0, 14.5), (4, 1.5, 19.0), (4, 2.0, 22.5), (2, 0.5, 7.0)],
)
def test_custom_allreduce_in_a_cuda_graph_matches_vllms_communicator_benchmark(ranks, mib, measured_us):
    """vLLM's ca_1stage rows on H100 (vllm-project/vllm#24111, #24532; TP4 the mean of the two PRs)."""
    link = step.Link.for_group(get_profile("h100-sxm"), ranks)
    eff = StepTimeModel(catalog_model("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm"), Scenario()).eff
    got = step.allreduce_seconds(eff, mib * 2**20, ranks, link, True, in_graph=True)
    assert got * 1e6 == pytest.approx(measured_us, rel=0.12)


def test_an_allreduce_inside_a_cuda_graph_is_cheaper_than_launched_eagerly():
    """Eager: the published eager timings (sglang#2904, vLLM column: TP4 1 MiB 40.2 us); in a graph ~14 us."""
    link = step.Link.for_group(get_profile("h100-sxm"), 4)
    eff = StepTimeModel(catalog_model("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm"), Scenario()).eff
    eager = step.allreduce_seconds(eff, 2**20, 4, link, True, in_graph=False)
    graph = step.allreduce_seconds(eff, 2**20, 4, link, True, in_graph=True)
    assert eager * 1e6 == pytest.approx(40.2, rel=0.1)
    assert graph < eager / 2


@pytest.mark.parametrize("repo,tp,engine", CASES)
def test_one_binder_per_step_binds_every_op_as_a_fresh_bind_does(repo, tp, engine):
    """The roofline binds a step's ops with one ``Binder`` (memos of the dtype, fractions, floors and collectives
    per distinct input): every op must come out exactly as ``bind`` alone gives it, in both stages, eager and
    in a graph, with the ops of every layer group and the model's own ops interleaved in one binder."""
    from planner.estimate.resolve import resolve
    from planner.estimate.roofline import Binder, bind, efficiency_for, engine_of, layer_groups, model_ops, step_shape

    model, hw = catalog_model(repo), get_profile("h100-sxm")
    sc = Scenario(tp=tp, engine=engine)
    res, eff, eng = resolve(model, hw, sc), efficiency_for(hw, sc=sc), engine_of(sc)
    checked = 0
    for stage, batch, length in (("prefill", 3, 700), ("decode", 13, 3000)):
        shape = step_shape(model, res, stage, batch, length)
        ops = [op for _, idx in layer_groups(model) for op in model.layers[idx[0]].ops(shape)]
        ops += model_ops(model, shape)
        binder = Binder(hw, eff, res.tp, eng, shape.num_seqs, res.ep)
        for graphs in (False, True):
            for op in ops:
                assert binder(op, graphs) == bind(op, hw, eff, res.tp, graphs, eng, shape.num_seqs, res.ep), op.name
                checked += 1
    assert checked >= 4 * 15  # both stages, both modes, every op of a layer at least


@pytest.mark.parametrize("repo,tp,engine", CASES)
@pytest.mark.parametrize("version", ["vllm@0.15.1", "vllm@0.8.5"])  # host work overlapped, and added
def test_the_simulators_inlined_steps_are_the_general_path_to_the_last_bit(repo, tp, engine, version):
    """``step_seconds`` of a mixed step and ``decode_steps`` inline their calls for the simulator's hot path; the
    floats are those of the general path (``_mixed_gpu``, ``_decode_scalar``, ``gpu_step_seconds``,
    ``combine_step``)."""
    model, hw = catalog_model(repo), get_profile("h100-sxm")
    stm = StepTimeModel(model, hw, Scenario(tp=tp, engine=engine, engine_version=version))
    tables = (stm.prefill_table, stm.decode_table)
    for prefill, start, seqs, context in [(512, 0, 0, 0), (77, 300, 5, 900), (2048, 0, 130, 4000), (8, 16, 600, 1)]:
        pairs, kv = prefill * (start + (prefill + 1) * 0.5), seqs * context
        kernels, launches = stm._mixed_gpu(tables, prefill, pairs, 1, seqs, kv)
        gpu = step.gpu_step_seconds(float(kernels), float(launches))
        general = float(
            step.combine_step(gpu, float(step.host_seconds(stm.eff, seqs + 1)), stm.engine.async_scheduling)
        )
        fast = stm.step_seconds(
            prefill_tokens=prefill, prefill_attention_pairs=pairs, decode_seqs=seqs, decode_kv_tokens=kv
        )
        assert fast == general
    for batch, context in DECODES:
        assert stm.decode_steps(batch)[batch * context] == stm._decode_scalar(
            float(batch), float(batch * context) / batch
        )
