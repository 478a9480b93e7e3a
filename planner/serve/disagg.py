"""Disaggregated prefill and decode (xPyD): a prefill pool and a decode pool, the KV cache sent between them.

As vLLM's P/D connectors (NixlConnector, Mooncake) and llm-d / Dynamo run it: a router sends each request to a
prefill instance, which computes the prompt's KV cache (``max_tokens=1``); the KV cache goes to a decode
instance over the link between the pools; the decode instance loads it as already-computed blocks and
generates every output token itself, the first included (vLLM's ``toy_proxy_server.py`` drops the prefill's
token). So per request:

    TTFT = prefill queue + prefill + KV transfer + the decode instance's queue and first step
    KV transfer = max(prompt KV bytes per prefill rank, per decode rank) / (link bytes/s x efficiency) + latency

``simulate_disaggregated`` runs each pool's instances with the simulator: the prefill instances take the
requests round robin (prefill only: one output token), each request's KV transfer starts when its prefill
ends, and the decode instances take the arrivals that result, round robin, with the prompt's whole blocks
cached (the last partial block is recomputed, as vLLM schedules a transferred request). Both pools follow the
scenario (card, engine, limits, PP, expert parallelism) at their own TP; with data_parallel_size > 1 each
instance is that many DP engines, each taking its share of the pool's round robin. With speculative decoding the
decode pool speculates and the prefill pool does not (it computes the prompt and one token).

Link bandwidth (``KV_LINKS``), per GPU and one way: ``nvlink`` the card's NVLink at the NCCL ring efficiency
(0.82, nccl-tests#212, as the all-reduce uses); ``rdma`` the card's per-GPU network (``inter_node_bandwidth``)
at 0.475: Mooncake's Transfer Engine moves 40 GB (the KV cache of 128k LLaMA3-70B tokens) at 190 GB/s over
8 x 400 Gbps RoCE, 400 GB/s of wire (kvcache-ai/Mooncake README, quoted in uccl-project/uccl#166); ``tcp``
4.6x slower than that (the same source: "about ... 4.6x faster than the TCP protocol"). Latency per transfer:
the NCCL cross-node figure the all-reduce uses (46 us) for rdma and tcp, the NVLink one (12.5 us) inside a node.

Left out: the router's own time, KV transfer contention between requests on one NIC (each request is sent
as if alone), prefill instances holding KV until the decode side pulls it (their KV capacity is the prefill
pool's limit only through its own cache), and prefix-cache reuse across requests on the prefill side.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.errors import ScenarioError
from planner.estimate.step import NCCL_LATENCY_SECONDS
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.serve.replica import planned_replica, replica_step_cost, simulate_scenario
from planner.serve.simulate import (
    LatencyStats,
    latency_stats,
    run_engine,
    weighted_latency_stats,
)
from planner.serve.workload import ConcurrencyArrivals, RequestSet, Workload, generate_requests, round_robin_share

_SPEC = ConfigDict(frozen=True, extra="forbid")
#: The paths a KV cache can take between the pools (``KV_LINKS`` prices each).
KVLinkKind = Literal["nvlink", "rdma", "tcp"]
KV_LINK_KINDS: tuple[str, ...] = get_args(KVLinkKind)
#: Most instances one pool may have (each is simulated; real deployments run a handful per pool).
MAX_INSTANCES = 32


class KVLink(BaseModel):
    """How fast one GPU sends a KV cache to another: a share of a link and a latency per transfer."""

    model_config = _SPEC
    kind: KVLinkKind = Field(description="The path between the pools.")
    efficiency: float = Field(gt=0, le=1, description="Share of the link's one-way bandwidth a transfer gets.")
    latency_seconds: float = Field(ge=0, description="Fixed time per transfer, in seconds.")
    source: str = Field(description="Where the efficiency and latency come from.")

    def bytes_per_s(self, hw: HardwareProfile) -> float:
        """The per-GPU one-way bandwidth a transfer gets on ``hw``'s link of this kind, bytes/s."""
        if self.kind == "nvlink":
            link = hw.unidirectional_interconnect_bytes_per_s
        else:
            link = hw.inter_node_bandwidth_bytes_per_s
        if not link:
            raise ScenarioError(
                f"{hw.name} has no {'NVLink' if self.kind == 'nvlink' else 'network'} bandwidth in its profile, "
                f"so a KV transfer over {self.kind} cannot be timed.",
                hint="Pick another --kv-transfer-link, or add the bandwidth to the card's YAML.",
            )
        return link * self.efficiency


_MOONCAKE = "kvcache-ai/Mooncake README via uccl-project/uccl#166: 190 GB/s over 8 x 400 Gbps RoCE (400 GB/s wire)"
KV_LINKS: dict[str, KVLink] = {
    "nvlink": KVLink(
        kind="nvlink",
        efficiency=0.82,
        latency_seconds=NCCL_LATENCY_SECONDS["nvlink"],
        source="NVLink at the NCCL ring efficiency (nccl-tests#212), NCCL's in-domain latency",
    ),
    "rdma": KVLink(
        kind="rdma", efficiency=190 / 400, latency_seconds=NCCL_LATENCY_SECONDS["network"], source=_MOONCAKE
    ),
    "tcp": KVLink(
        kind="tcp",
        efficiency=190 / 400 / 4.6,
        latency_seconds=NCCL_LATENCY_SECONDS["network"],
        source=_MOONCAKE + "; TCP 4.6x slower on the same network",
    ),
}


class DisaggLayout(BaseModel):
    """A prefill pool and a decode pool (xPyD), each of instances at its own TP, and the link between them."""

    model_config = _SPEC
    prefill_instances: int = Field(1, ge=1, le=MAX_INSTANCES, description="Prefill instances (x of xPyD).")
    prefill_tp: int = Field(1, ge=1, le=64, description="Tensor-parallel size of each prefill instance.")
    decode_instances: int = Field(1, ge=1, le=MAX_INSTANCES, description="Decode instances (y of xPyD).")
    decode_tp: int = Field(1, ge=1, le=64, description="Tensor-parallel size of each decode instance.")
    kv_transfer_link: KVLinkKind = Field(
        "rdma", description="How the KV cache goes from a prefill to a decode instance (NVLink in one node, RDMA, TCP)."
    )

    @property
    def gpus(self) -> int:
        return self.prefill_instances * self.prefill_tp + self.decode_instances * self.decode_tp

    def gpus_on(self, sc: Scenario) -> int:
        """GPUs of both pools with ``sc``'s layout: every instance is ``sc.pp`` stages x ``sc.data_parallel_size``
        engines of its TP."""
        return self.gpus * sc.pp * sc.data_parallel_size

    @property
    def label(self) -> str:
        pools = f"{self.prefill_instances}P{self.decode_instances}D"
        return f"{pools} (prefill TP{self.prefill_tp}, decode TP{self.decode_tp}, KV over {self.kv_transfer_link})"


class DisaggResult(BaseModel):
    """What the two pools delivered to the clients, simulated (latencies as ``vllm bench serve`` defines them)."""

    model_config = _SPEC
    kind: Literal["simulated"] = Field("simulated", description="What these numbers are.")
    layout: DisaggLayout = Field(description="The pools simulated.")
    gpus: int = Field(
        description="GPUs of both pools ((x prefill TP + y decode TP) x the scenario's PP x its DP), a count."
    )
    ttft_seconds: LatencyStats | None = Field(description="Arrival to the decode instance's first token, seconds.")
    tpot_seconds: LatencyStats | None = Field(description="Time per output token after the first, seconds.")
    itl_seconds: LatencyStats | None = Field(description="Gaps between consecutive tokens, pooled, seconds.")
    e2e_seconds: LatencyStats | None = Field(description="Arrival to the last token, seconds.")
    kv_transfer_seconds: LatencyStats | None = Field(description="Each request's KV transfer between the pools.")
    prefill_queue_seconds: LatencyStats | None = Field(
        description="Arrival to the end of the prefill: the prefill pool's queue and compute, seconds."
    )
    decode_queue_seconds: LatencyStats | None = Field(
        description="KV arrival to the first token: the decode pool's wait for KV space and its first step, seconds."
    )
    kv_transfer_bytes_per_gpu_mean: float = Field(description="Mean KV bytes one GPU sends per request.")
    kv_link_bytes_per_s: float = Field(description="The bandwidth one transfer gets, bytes/s.")
    kv_link_source: str = Field(description="Where the link's efficiency and latency come from.")
    throughput_tokens_per_s: float | None = Field(description="Output tokens of completed requests / duration.")
    num_requests: int = Field(description="Requests offered, a count.")
    num_completed: int = Field(description="Requests that finished, a count.")
    num_rejected: int = Field(description="Requests either pool refused (too long for its KV cache), a count.")


def _subset(reqs: RequestSet, idx: np.ndarray, arrival: np.ndarray, outputs: np.ndarray, cached: np.ndarray):
    """Requests ``idx`` as a RequestSet with these arrivals, outputs and cached prompt tokens (arrival order)."""
    return RequestSet(
        arrival,
        reqs.input_tokens[idx],
        outputs,
        None,
        0.0,
        shared_prefix_tokens=cached,
    )


def simulate_disaggregated(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    layout: DisaggLayout,
    efficiency: Efficiency | None = None,
    draft_model: ModelSpec | None = None,
) -> DisaggResult:
    """Serve ``workload`` on ``layout``'s two pools (module docstring); raises ScenarioError when a pool does
    not start or the arrivals are closed-loop (a disaggregated router is modelled for open-loop traffic).

    With ``sc.speculative`` the decode pool speculates (``draft_model``: the draft's spec, method draft, as
    ``simulate_scenario`` takes it); the prefill pool does not (it emits one token, the one the proxy drops).
    With ``sc.data_parallel_size`` > 1 every instance of either pool is that many DP engines of its TP (vLLM's
    attention DP, experts shared over them), each with its own scheduler and KV cache: the router's round
    robin goes over every engine of the pool."""
    if isinstance(workload.arrivals, ConcurrencyArrivals) and not workload.classes:
        raise ScenarioError(
            "disaggregated serving is simulated for open-loop arrivals (a rate or a trace), not a closed loop.",
            hint="Give --qps (or a trace) instead of --concurrency.",
        )
    if workload.max_in_flight is not None:
        raise ScenarioError(
            "disaggregated serving is simulated for uncapped open-loop arrivals; a cap on requests in flight "
            "(--max-concurrency with --qps) would hold requests at the client between the pools, which is not "
            "modelled.",
            hint="Drop the cap (--max-concurrency; 0 on the Simulate page) and keep the rate, or simulate the "
            "co-located deployment.",
        )
    sc_p = sc.model_copy(update={"tp": layout.prefill_tp, "num_gpus": None, "speculative": None})
    sc_d = sc.model_copy(update={"tp": layout.decode_tp, "num_gpus": None})
    plan_p, sched_p = planned_replica(model, hw, sc_p)
    plan_d, sched_d = planned_replica(model, hw, sc_d)
    step_p = replica_step_cost(model, hw, sc_p, efficiency)
    step_d = replica_step_cost(model, hw, sc_d, efficiency, draft_model)
    dp = sc.data_parallel_size
    prefill_engines, decode_engines = layout.prefill_instances * dp, layout.decode_instances * dp
    reqs = generate_requests(workload)
    n = len(reqs)
    assert reqs.arrival_time_s is not None  # open loop: checked above
    arrival = reqs.arrival_time_s
    prompt = reqs.input_tokens
    rejected = np.zeros(n, dtype=bool)

    # Prefill pool: round robin; each request prefills and emits the token the proxy drops.
    prefill_done = np.full(n, np.nan)
    for i in range(prefill_engines):
        idx = np.arange(i, n, prefill_engines)
        mine = _subset(reqs, idx, arrival[idx], np.ones(len(idx), dtype=np.int64), np.zeros(len(idx), dtype=np.int64))
        run = run_engine(mine, sched_p, step_p)
        prefill_done[idx] = run.first_token_time_s
        rejected[idx] |= run.rejected

    link = KV_LINKS[layout.kv_transfer_link]
    link_bytes_per_s = link.bytes_per_s(hw)
    per_gpu = prompt * max(plan_p.kv_bytes_per_token_per_gpu, plan_d.kv_bytes_per_token_per_gpu)
    transfer = per_gpu / link_bytes_per_s + link.latency_seconds
    ready = prefill_done + transfer

    # Decode pool: arrivals when the KV is in, round robin in that order, the prompt's blocks already computed.
    order = np.argsort(np.where(np.isnan(ready), np.inf, ready), kind="stable")
    order = order[~np.isnan(ready[order])]
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    itl_values, itl_weights = [], []
    for j in range(decode_engines):
        idx = order[j::decode_engines]
        if not len(idx):
            continue
        mine = _subset(reqs, idx, ready[idx], reqs.output_tokens[idx], prompt[idx])
        run = run_engine(mine, sched_d, step_d)
        first[idx] = run.first_token_time_s
        finish[idx] = run.finish_time_s
        rejected[idx] |= run.rejected
        itl_values += [run.step_seconds, run.itl_extra_seconds]
        itl_weights += [run.itl_weight, run.itl_extra_weight]

    done = ~np.isnan(finish)
    ttft = first[done] - arrival[done]
    e2e = finish[done] - arrival[done]
    out = reqs.output_tokens[done]
    multi = out > 1
    tpot = (e2e[multi] - ttft[multi]) / (out[multi] - 1)
    duration = float(finish[done].max() - arrival.min()) if done.any() else None
    itl = weighted_latency_stats(np.concatenate(itl_values), np.concatenate(itl_weights)) if itl_values else None
    sent = ~np.isnan(prefill_done)
    return DisaggResult(
        layout=layout,
        gpus=layout.gpus_on(sc),
        ttft_seconds=latency_stats(ttft),
        tpot_seconds=latency_stats(tpot),
        itl_seconds=itl,
        e2e_seconds=latency_stats(e2e),
        kv_transfer_seconds=latency_stats(transfer[sent]),
        prefill_queue_seconds=latency_stats(prefill_done[sent] - arrival[sent]),
        decode_queue_seconds=latency_stats(first[done] - ready[done]),
        kv_transfer_bytes_per_gpu_mean=float(per_gpu[sent].mean()) if sent.any() else 0.0,
        kv_link_bytes_per_s=link_bytes_per_s,
        kv_link_source=link.source,
        throughput_tokens_per_s=float(out.sum()) / duration if duration else None,
        num_requests=n,
        num_completed=int(done.sum()),
        num_rejected=int(rejected.sum()),
    )


class LayoutComparison(BaseModel):
    """The same GPUs as one aggregated pool and as the two pools, with the reading of the difference."""

    model_config = _SPEC
    disaggregated: DisaggResult = Field(description="The xPyD layout.")
    aggregated_replicas: int = Field(description="Aggregated replicas on the same GPUs (GPUs / (tp x pp x dp)).")
    aggregated_ttft_seconds: LatencyStats | None = Field(description="TTFT of one aggregated replica at 1/R the load.")
    aggregated_tpot_seconds: LatencyStats | None = Field(description="TPOT of one aggregated replica at 1/R the load.")
    aggregated_overloaded: bool | None = Field(description="An aggregated replica is past its sustainable rate.")
    verdict: str = Field(description="Which layout gives the lower P99 TTFT and P99 TPOT, by how much, and why.")


def _verdict(
    dis: DisaggResult, agg_ttft: LatencyStats | None, agg_tpot: LatencyStats | None, replicas: int, sc: Scenario
) -> str:
    """Which layout has the lower P99 TPOT and P99 TTFT, by how much, and where the disaggregated TTFT goes."""
    p99 = lambda stats: stats.p99 if stats is not None else None  # noqa: E731
    dp = f" DP{sc.data_parallel_size}" if sc.data_parallel_size > 1 else ""
    parts = [f"{dis.layout.label} on {dis.gpus} GPUs against {replicas} aggregated TP{sc.tp}{dp} replicas"]
    for metric, d, a in (
        ("TPOT", p99(dis.tpot_seconds), p99(agg_tpot)),
        ("TTFT", p99(dis.ttft_seconds), p99(agg_ttft)),
    ):
        if d is None or a is None or a <= 0:
            continue
        lower = "disaggregated" if d < a else "aggregated"
        parts.append(
            f"P99 {metric}: disaggregated {d * 1e3:,.1f} ms, aggregated {a * 1e3:,.1f} ms ({(d / a - 1) * 100:+.0f}%), "
            f"{lower} lower"
        )
    waits = {
        "the prefill pool (queue and prefill)": p99(dis.prefill_queue_seconds),
        "the KV transfer": p99(dis.kv_transfer_seconds),
        "the decode pool's queue for KV space and its first step": p99(dis.decode_queue_seconds),
    }
    known = {k: v for k, v in waits.items() if v is not None}
    if known:
        where = max(known, key=lambda k: known[k])
        parts.append(f"the disaggregated P99 TTFT is mostly {where} ({known[where] * 1e3:,.1f} ms at P99)")
    return "; ".join(parts) + "."


def compare_layouts(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    layout: DisaggLayout,
    efficiency: Efficiency | None = None,
    draft_model: ModelSpec | None = None,
) -> LayoutComparison:
    """``layout`` against aggregated replicas of ``sc`` on the same GPUs, the load split round robin
    (``draft_model``: the draft's spec for speculative method draft, for the decode pool and the replicas)."""
    dis = simulate_disaggregated(model, hw, sc, workload, layout, efficiency, draft_model)
    replicas = max(1, dis.gpus // sc.gpus_per_replica)
    agg = simulate_scenario(model, hw, sc, round_robin_share(workload, replicas), efficiency, draft_model=draft_model)
    verdict = _verdict(dis, agg.ttft_seconds, agg.tpot_seconds, replicas, sc)
    return LayoutComparison(
        disaggregated=dis,
        aggregated_replicas=replicas,
        aggregated_ttft_seconds=agg.ttft_seconds,
        aggregated_tpot_seconds=agg.tpot_seconds,
        aggregated_overloaded=agg.overloaded,
        verdict=verdict,
    )


class DisaggCandidate(BaseModel):
    """One xPyD layout probed at the whole target rate, against the SLO."""

    model_config = _SPEC
    layout: DisaggLayout = Field(description="The pools.")
    gpus: int = Field(description="GPUs of both pools, a count.")
    usd_per_hour: float | None = Field(description="GPUs x the card's $/GPU-hour; None without a price.")
    meets: bool = Field(description="Every SLO target holds at the target rate.")
    failing: str | None = Field(description="The first target that fails, with its value; None when all hold.")
    ttft_p99_seconds: float | None = Field(description="P99 TTFT at the target rate, seconds.")
    tpot_p99_seconds: float | None = Field(description="P99 TPOT at the target rate, seconds.")


class DisaggSearch(BaseModel):
    """The SLO search's best aggregated deployment beside the fewest-GPU disaggregated one that meets the SLO."""

    model_config = _SPEC
    kind: Literal["simulated"] = Field("simulated", description="What these numbers are.")
    aggregated_label: str = Field(description="The aggregated recommendation (replicas x one replica).")
    aggregated_gpus: int = Field(description="Its GPUs, a count.")
    aggregated_usd_per_hour: float | None = Field(description="Its $/hour; None without a price.")
    aggregated_limiting_target: str | None = Field(description="The target that bounds its rate per replica.")
    best: DisaggCandidate | None = Field(description="The fewest-GPU xPyD layout that meets the SLO; None if none did.")
    tried: tuple[DisaggCandidate, ...] = Field(
        description="Every layout probed, in the order tried (fewest GPUs first)."
    )
    kv_transfer_link: KVLinkKind = Field(description="The link the layouts were probed with.")
    verdict: str = Field(description="Which wins, by GPUs and cost, and why (the binding target of each).")
