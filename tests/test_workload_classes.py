"""Mixed workloads: request classes with their own rates, lengths, priorities and shared system prompts.

Issue 12's check: a long-prompt class raises a short class's P99 TTFT under FCFS, and vLLM's
``--scheduling-policy priority`` lowers it again. Also: how classes are drawn and merged, a shared
prefix's cache hits by hand, the per-class results, and the inputs refused with their message.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from planner.errors import ScenarioError
from planner.serve.simulate import LinearStepCost, SchedulerConfig, request_cached_tokens, run_engine, summarize
from planner.serve.workload import (
    MAX_REQUESTS,
    FixedLength,
    PoissonArrivals,
    RequestClass,
    RequestSet,
    SharedPrefix,
    UniformLength,
    Workload,
    generate_requests,
)

COST = LinearStepCost(
    fixed_seconds=5e-3, per_token_seconds=5e-5, per_attention_pair_seconds=1e-11, per_kv_token_seconds=1e-7
)
CHAT = RequestClass(
    name="chat",
    request_rate_per_s=8.0,
    num_requests=400,
    input_tokens=FixedLength(tokens=200),
    output_tokens=FixedLength(tokens=100),
    priority=0,
)
DOCS = RequestClass(
    name="docs",
    request_rate_per_s=0.6,
    num_requests=30,
    input_tokens=FixedLength(tokens=6000),
    output_tokens=FixedLength(tokens=200),
    priority=1,
)


def _simulate(classes, policy="fcfs", **scheduler):
    limits = {"num_gpu_blocks": 6000, "max_num_seqs": 64, "max_num_batched_tokens": 2048, **scheduler}
    run = run_engine(
        generate_requests(Workload(classes=classes, seed=1)),
        SchedulerConfig(scheduling_policy=policy, **limits),
        COST,
    )
    return run, summarize(run, step_cost_model="LinearStepCost")


def test_a_long_class_slows_the_short_one_under_fcfs_and_priority_scheduling_lowers_it():
    _, alone = _simulate((CHAT,))
    _, fcfs = _simulate((CHAT, DOCS))
    _, prio = _simulate((CHAT, DOCS), "priority")
    chat = lambda r: r.classes[0].ttft_seconds.p99  # noqa: E731
    assert chat(fcfs) > 2 * chat(alone)  # the 6,000-token prompts hold the chat requests up
    assert chat(prio) < chat(fcfs)
    assert prio.classes[1].ttft_seconds.p99 >= fcfs.classes[1].ttft_seconds.p99 * 0.9  # docs pay for it, or not much
    assert [c.name for c in fcfs.classes] == ["chat", "docs"]


def test_per_class_results_partition_the_run():
    run, result = _simulate((CHAT, DOCS))
    assert sum(c.num_requests for c in result.classes) == result.num_requests == 430
    assert sum(c.num_completed for c in result.classes) == result.num_completed
    docs = run.class_id == 1
    ttft = (run.first_token_time_s - run.arrival_time_s)[docs]
    assert result.classes[1].ttft_seconds.p50 == pytest.approx(float(np.percentile(ttft, 50)))
    assert "classes" not in summarize(
        run_engine(generate_requests(Workload(num_requests=20)), SchedulerConfig(num_gpu_blocks=6000), COST),
        step_cost_model="x",
    ).model_dump(mode="json")  # one stream: the JSON is what it was before classes


def test_classes_are_drawn_apart_and_merged_in_arrival_order():
    both = generate_requests(Workload(classes=(CHAT, DOCS), seed=7))
    alone = generate_requests(Workload(classes=(CHAT,), seed=7))
    assert len(both) == 430 and both.class_names == ("chat", "docs")
    assert np.all(np.diff(both.arrival_time_s) >= 0)
    assert np.array_equal(both.arrival_time_s[both.class_id == 0], alone.arrival_time_s)  # docs leave chat alone
    assert set(both.priority[both.class_id == 1]) == {1}
    assert (both.class_id == 0).sum() == 400 and both.arrival_time_s[both.class_id == 1][0] == 0.0
    again = generate_requests(Workload(classes=(CHAT, DOCS), seed=7))
    assert np.array_equal(both.input_tokens, again.input_tokens) and np.array_equal(both.class_id, again.class_id)


def test_a_shared_system_prompt_is_computed_once_per_prompt_then_found_in_whole_blocks():
    rc = RequestClass(
        name="agents",
        request_rate_per_s=5.0,
        num_requests=200,
        input_tokens=UniformLength(low_tokens=20, high_tokens=300),
        shared_prefix=SharedPrefix(tokens=1000, prompts=3),
    )
    reqs = generate_requests(Workload(classes=(rc,), seed=2))
    assert (reqs.shared_prefix_tokens == 0).sum() == 3  # the first use of each of the three prompts
    assert np.all(reqs.input_tokens >= 1020) and np.all(reqs.input_tokens <= 1300)
    cached = request_cached_tokens(reqs, 16)
    assert set(cached[reqs.shared_prefix_tokens > 0]) == {992}  # floor(1000 / 16) x 16
    assert set(cached[reqs.shared_prefix_tokens == 0]) == {0}


def test_priority_admits_a_later_high_priority_request_before_earlier_low_priority_ones():
    # 40 low-priority requests at t = 0 fill the queue (4 run at once); one urgent request comes at t = 0.1 s
    n = 41
    arrival = np.zeros(n)
    arrival[-1] = 0.1
    reqs = RequestSet(
        arrival,
        np.full(n, 256),
        np.full(n, 64),
        None,
        0.0,
        class_id=np.array([0] * 40 + [1]),
        priority=np.array([5] * 40 + [-1]),
        shared_prefix_tokens=np.zeros(n, dtype=np.int64),
        class_names=("batch", "urgent"),
    )
    waited = {}
    for policy in ("fcfs", "priority"):
        limits = SchedulerConfig(num_gpu_blocks=6000, max_num_seqs=4, scheduling_policy=policy)
        run = run_engine(reqs, limits, COST)
        waited[policy] = int((run.first_token_time_s[:40] < run.first_token_time_s[40]).sum())
    assert waited["fcfs"] == 40  # it queues behind every earlier request
    assert waited["priority"] <= 8  # it takes the first free slot: only those already running start first


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"classes": [CHAT.model_dump()], "arrivals": {"kind": "poisson"}}, "takes no arrivals"),
        ({"classes": [CHAT.model_dump(), CHAT.model_dump()]}, "names repeat: chat"),
        (
            {
                "classes": [
                    {**CHAT.model_dump(), "num_requests": MAX_REQUESTS},
                    {**DOCS.model_dump(), "num_requests": 1},
                ]
            },
            "at most 1,000,000",
        ),
        ({"classes": [{**CHAT.model_dump(), "name": "a b"}]}, "String should match pattern"),
        ({"classes": [{**CHAT.model_dump(), "request_rate_per_s": 0}]}, "greater than 0"),
        ({"classes": [{**CHAT.model_dump(), "shared_prefix": {"tokens": 0}}]}, "greater than or equal to 1"),
    ],
)
def test_bad_classes_are_refused_with_the_reason(data, message):
    with pytest.raises((ScenarioError, ValidationError), match=message):
        Workload.model_validate(data)


def test_a_classed_workload_keeps_its_count_and_refuses_a_single_stream_rate():
    w = Workload(classes=(CHAT, DOCS))
    assert w.num_requests == 430
    with pytest.raises(ScenarioError, match="takes no arrivals"):
        Workload(classes=(CHAT,), arrivals=PoissonArrivals(request_rate_per_s=2.0))


# ---- the CLI: simulate --workload-file FILE [--scheduling-policy priority] ----------------------------------

MIX_YAML = """
classes:
  - {name: chat, request_rate_per_s: 6, num_requests: 300, input_tokens: {kind: fixed, tokens: 300},
     output_tokens: {kind: fixed, tokens: 100}, shared_prefix: {tokens: 800, prompts: 4}}
  - {name: docs, request_rate_per_s: 0.5, num_requests: 25, priority: 1,
     input_tokens: {kind: uniform, low_tokens: 4000, high_tokens: 12000}, output_tokens: {kind: fixed, tokens: 200}}
"""


def _cli(capsys, argv):
    from planner.cli import main

    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_takes_a_workload_file_and_reports_each_class(capsys, tmp_path):
    path = tmp_path / "mix.yaml"
    path.write_text(MIX_YAML)
    argv = ["simulate", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm", "--max-model-len", "16384"]
    code, out, err = _cli(capsys, [*argv, "--workload-file", str(path), "--format", "json"])
    assert code == 0, err
    data = __import__("json").loads(out)
    assert [c["name"] for c in data["classes"]] == ["chat", "docs"]
    assert data["num_requests"] == 325 and data["offered_requests_per_s"] == pytest.approx(6.5)
    assert data["scheduler"]["scheduling_policy"] == "fcfs"
    docs = data["classes"][1]
    assert docs["num_completed"] == 25 and docs["ttft_seconds"]["p50"] > data["classes"][0]["ttft_seconds"]["p50"]
    code, out, _ = _cli(capsys, [*argv, "--workload-file", str(path), "--scheduling-policy", "priority"])
    assert code == 0 and "per request class" in out and "scheduling priority" in out


@pytest.mark.parametrize(
    ("text", "extra", "message"),
    [
        (MIX_YAML, ["--input-len", "512"], "--input-len cannot apply"),
        ("classes: []\n", [], "non-empty 'classes' list"),
        ("classes: [{name: a}]\n", [], "classes.0.request_rate_per_s: Field required"),
        ("classes: [{name: a, request_rate_per_s: 1, num_requests: 5}]\nrate: 3\n", [], "unknown top-level key"),
        ("classes: [\n", [], "does not parse"),
    ],
)
def test_bad_workload_files_are_refused_naming_the_field(capsys, tmp_path, text, extra, message):
    path = tmp_path / "w.yaml"
    path.write_text(text)
    code, _, err = _cli(capsys, ["simulate", "meta-llama/Llama-3.1-8B", "--workload-file", str(path), *extra])
    assert code == 2 and message in err and "Traceback" not in err


# ---- one shared pool or a pool per class (simulate --compare-pools) ------------------------------------------


def test_a_pool_of_its_own_gives_the_short_class_its_first_tokens_sooner(tmp_path, capsys):
    from planner.hardware import get_profile
    from planner.model.families import build_spec
    from planner.model.sources import load_config
    from planner.scenario import Scenario
    from planner.serve.pools import compare_pools
    from planner.serve.workload import load_workload_file

    path = tmp_path / "mix.yaml"
    path.write_text(MIX_YAML)
    model = build_spec(load_config("meta-llama/Llama-3.1-8B").config, "meta-llama/Llama-3.1-8B")
    cmp = compare_pools(model, get_profile("h100-sxm"), Scenario(max_model_len=16384), load_workload_file(path))
    assert cmp.replicas == 2 and cmp.gpus == 2
    shared_chat, own_chat = cmp.shared[0], cmp.separate[0]
    assert shared_chat.name == own_chat.name == "chat"
    assert own_chat.ttft_seconds.p99 < shared_chat.ttft_seconds.p99 / 2  # no 4k-12k-token prompt ahead of it
    assert sum(c.num_requests for c in cmp.shared) == 150 + 12  # half of each class on one of the two replicas
    with pytest.raises(ScenarioError, match="two or more request classes"):
        compare_pools(model, get_profile("h100-sxm"), Scenario(), Workload(classes=(CHAT,)))
    code, _, err = _cli(capsys, ["simulate", "meta-llama/Llama-3.1-8B", "--compare-pools"])
    assert code == 2 and "needs --workload-file" in err


def test_the_readme_example_workload_file_loads():
    from pathlib import Path

    from planner.serve.workload import load_workload_file

    w = load_workload_file(Path(__file__).parents[1] / "docs" / "examples" / "chat-and-documents.yaml")
    assert [c.name for c in w.classes] == ["chat", "documents"] and w.num_requests == 2150
