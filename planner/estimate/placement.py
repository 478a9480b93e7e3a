"""Placement: which GPU of which node holds which layers, and which link each transfer crosses.

One replica of ``tp x pp`` GPUs, as vLLM lays it out:

* ranks are stage-major: global rank = pp_rank x tp + tp_rank (ranks 0..tp-1 are stage 0, the
  output comes from rank world_size - tp, the first TP rank of the last stage;
  vllm/v1/executor/multiproc_executor.py ``_get_output_rank``);
* the replica spreads evenly over its nodes, one pod of tp x pp / nodes GPUs per node (a
  LeaderWorkerSet gives every pod the same resources; ``planner.deploy.export`` writes it so), and
  ranks fill the pods in order: node = rank // GPUs per pod;
* stage k holds layers ``get_pp_indices(L, k, pp)`` (vllm/distributed/utils.py;
  ``planner.estimate.memory.stage_layers``), the embedding on the first stage, the final norm and
  lm_head on the last;
* a TP group or a stage boundary whose ranks sit in one NVLink domain (``hw.gpus_per_node``: 8 for
  HGX, 72 for GB200 NVL72, whose 4-GPU trays are the nodes, ``hw.host_gpus``) talks over NVLink (or
  PCIe); one that leaves the domain pays the network (``hw.inter_node_bandwidth_bytes_per_s``,
  ``planner.estimate.links.Link``).

Bytes per rank come from the memory plan's own accounting (``stage_weight_bytes``, the stage's KV
layout, the plan's block count: vLLM allocates the same number of blocks on every rank, the minimum
over them), not re-derived here. Layouts that cannot run are refused (``check_layout``).

Expert and attention data parallelism (``--enable-expert-parallel``, ``--data-parallel-size``): the replica is
dp engines of tp x pp GPUs each, DP rank d's GPUs numbered after rank d - 1's (global = d x tp x pp + stage x tp +
tp_rank); every DP rank runs its own attention (TP inside it) over its own batch and KV cache, the dense and
attention weights replicated across DP ranks. The routed experts are split whole over the EP group of tp x dp
ranks (``FusedMoEParallelConfig.make``: ep_rank = dp_rank x tp + tp_rank), contiguously as vLLM's
``determine_expert_map`` places them ('linear': E // ep each, one more on the first E % ep ranks).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import ScenarioError
from planner.estimate.links import Link
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.units import cdiv

_SPEC = ConfigDict(frozen=True, extra="forbid")


class RankPlacement(BaseModel):
    """What one GPU of the replica holds."""

    model_config = _SPEC
    rank: int = Field(description="Global rank in the replica: stage x tp + tp_rank (vLLM's numbering).")
    stage: int = Field(description="Pipeline stage (pp rank), 0 first.")
    tp_rank: int = Field(description="Rank inside the stage's tensor-parallel group.")
    node: int = Field(description="Node (server) that holds this GPU: rank // GPUs per node.")
    layer_start: int = Field(description="First decoder layer on this rank.")
    layer_stop: int = Field(description="One past the last decoder layer on this rank.")
    holds_embedding: bool = Field(description="The token embedding lives here (first stage).")
    holds_lm_head: bool = Field(description="The final norm and lm_head live here (last stage).")
    weight_bytes: int = Field(
        description="Weight bytes on this GPU (exact: the memory plan's stage weights, less the experts this rank "
        "holds fewer than the fullest under an uneven expert map)."
    )
    kv_cache_bytes: int = Field(
        description="KV-cache bytes this GPU allocates: the plan's blocks x this stage's block bytes (estimate)."
    )
    kv_bytes_per_token: int = Field(description="KV bytes one token costs on this GPU (exact).")
    dp_rank: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Data-parallel rank (engine) this GPU belongs to: its own batch and KV cache; None without DP.",
    )
    ep_rank: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Expert-parallel rank: dp_rank x tp + tp_rank (vLLM); None without --enable-expert-parallel.",
    )
    experts: tuple[int, int] | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="[first, one past the last] routed expert this GPU holds whole, in every MoE layer (vLLM's "
        "linear expert map); None without --enable-expert-parallel (every GPU holds a TP slice of every expert).",
    )


class StagePlacement(BaseModel):
    """One pipeline stage: its layers, its GPUs and the links it uses."""

    model_config = _SPEC
    stage: int = Field(description="Pipeline stage (pp rank), 0 first.")
    layer_start: int = Field(description="First decoder layer of the stage.")
    layer_stop: int = Field(description="One past the stage's last decoder layer.")
    ranks: list[int] = Field(
        description="Global ranks of the stage's tensor-parallel group (of every data-parallel rank's copy, with DP)."
    )
    nodes: list[int] = Field(description="Nodes those ranks sit on.")
    tp_link: str = Field(description="Link of the stage's TP all-reduce: nvlink, pcie or network (across nodes).")
    send_link: str | None = Field(
        description="Link of the activation send to the next stage (nvlink, pcie, network); None on the last stage."
    )


class Placement(BaseModel):
    """Every rank of one replica: stage, layers, node, bytes; and the links between them."""

    model_config = _SPEC
    tp: int = Field(description="Tensor-parallel size.")
    pp: int = Field(description="Pipeline-parallel size.")
    num_nodes: int = Field(description="Nodes the replica spans (--num-nodes, or the fewest that hold tp x pp).")
    gpus_per_node: int = Field(description="GPUs per node (server) of this card.")
    gpus_per_pod: int = Field(description="GPUs of the replica on each node: tp x pp / num_nodes.")
    nvlink_domain_gpus: int = Field(description="GPUs that share the fast interconnect (8 HGX, 72 NVL72).")
    stages: list[StagePlacement] = Field(description="The pipeline stages, first to last.")
    ranks: list[RankPlacement] = Field(description="Every GPU of the replica, by global rank.")
    weight_bytes_total: int = Field(description="Weights summed over the ranks (the plan's weight_bytes_total).")
    kv_cache_bytes_total: int = Field(description="KV-cache bytes summed over the ranks (estimate).")
    data_parallel_size: int | None = Field(
        None, exclude_if=lambda v: v is None, description="Data-parallel ranks (engines) of tp x pp GPUs; None: 1."
    )
    ep: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Expert-parallel size (tp x data-parallel size); None without --enable-expert-parallel.",
    )
    ep_link: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Link of the expert dispatch/combine (nvlink, pcie, network when the EP group leaves the "
        "NVLink domain); None without expert parallelism.",
    )


def num_nodes(hw: HardwareProfile, sc: Scenario) -> int:
    """Nodes one replica spans: ``--num-nodes``, else the fewest that hold tp x pp GPUs in equal pods
    without cutting a TP group (12 GPUs of TP 4 on 8-GPU servers: 3 nodes of 4, not 2 of 6)."""
    return sc.num_nodes or _fewest_nodes(hw, sc)


def _fewest_nodes(hw: HardwareProfile, sc: Scenario) -> int:
    gpus = sc.gpus_per_replica
    for nodes in range(cdiv(gpus, hw.host_gpus), gpus + 1):
        if _layout_problem(hw, sc, nodes, hint=False) is None:
            return nodes
    return cdiv(gpus, hw.host_gpus)  # no valid count: check_layout says why


def node_of(rank: int, gpus_per_pod: int) -> int:
    """The node holding global ``rank``: ranks fill the equal pods in order."""
    return rank // gpus_per_pod


def check_layout(hw: HardwareProfile, sc: Scenario, num_layers: int) -> None:
    """Refuse layouts that cannot run: more stages than layers, more GPUs per node than a node has, GPUs that
    do not split evenly over the nodes, a TP group cut across nodes (or spread over nodes when it fits
    one)."""
    if sc.pp > num_layers:
        raise ScenarioError(f"--pp {sc.pp} exceeds the {num_layers} layers.", hint=f"Use --pp {num_layers} or less.")
    problem = _layout_problem(hw, sc, num_nodes(hw, sc))
    if problem is not None:
        raise ScenarioError(problem[0], hint=problem[1])


def _layout_problem(hw: HardwareProfile, sc: Scenario, nodes: int, hint: bool = True) -> tuple[str, str] | None:
    """(what is wrong, what would make it work) for ``nodes`` nodes, or None when the layout runs (``hint``
    False: the message alone, as the search for the fewest nodes needs)."""
    tp, pp, gpus, host = sc.tp, sc.pp, sc.gpus_per_replica, hw.host_gpus
    fewest = cdiv(gpus, host)
    dp = f" x --data-parallel-size {sc.data_parallel_size}" if sc.data_parallel_size > 1 else ""
    if gpus > nodes * host:
        return (
            f"--tp {tp} x --pp {pp}{dp} = {gpus} GPUs, but --num-nodes {nodes} x {host} {hw.name} per node "
            f"hold {nodes * host}.",
            f"Use --num-nodes {fewest} or more, or lower --tp/--pp.",
        )
    if gpus % nodes:
        return (
            f"--tp {tp} x --pp {pp}{dp} = {gpus} GPUs do not split evenly over --num-nodes {nodes} (every node runs "
            "one pod of the same size).",
            f"Use a --num-nodes that divides {gpus}, e.g. {pp} (one stage per node).",
        )
    per_pod = gpus // nodes
    if tp <= host and (tp > per_pod or per_pod % tp):
        return (
            f"--tp {tp} fits one node of {host}, but {nodes} nodes of {per_pod} GPUs each cut a stage's TP group "
            "across nodes (its all-reduce over the network).",
            f"Use --num-nodes {_fewest_nodes(hw, sc)} (whole TP groups of {tp} on every node), or leave it out."
            if hint
            else "",
        )
    if tp > host and tp % per_pod:
        return (
            f"--tp {tp} spans nodes but not a whole number of them ({nodes} nodes of {per_pod} GPUs each).",
            f"Use --tp {host} (one node) or a multiple of it, and --pp for the rest.",
        )
    return None


def _link(hw: HardwareProfile, crosses_domain: bool) -> Link:
    """The link between GPUs inside one NVLink domain, or across domains (the network), from the profile
    (``Link.for_group``: a group of one rank sits inside the domain, one larger than it does not)."""
    return Link.for_group(hw, hw.gpus_per_node + 1 if crosses_domain else 1)


def tp_link(hw: HardwareProfile, sc: Scenario) -> Link:
    """The link of every stage's TP all-reduce (``check_layout`` keeps each group inside one domain unless
    it spans whole nodes, so all stages share it): ``Link.for_group(hw, tp)``."""
    return Link.for_group(hw, sc.tp)


def stage_links(hw: HardwareProfile, sc: Scenario) -> list[Link]:
    """The link each stage boundary k -> k + 1 crosses: rank k x tp + j sends to (k + 1) x tp + j; the network
    when any such pair sits in two NVLink domains (a domain holds gpus_per_node // host_gpus nodes: 1 for
    HGX, 18 trays of an NVL72), else the in-node link."""
    per_pod = sc.gpus_per_replica // num_nodes(hw, sc)
    nodes_per_domain = max(1, hw.gpus_per_node // hw.host_gpus)

    def domain(rank: int) -> int:
        return node_of(rank, per_pod) // nodes_per_domain

    out = []
    for k in range(sc.pp - 1):
        crosses = any(domain(k * sc.tp + j) != domain((k + 1) * sc.tp + j) for j in range(sc.tp))
        out.append(_link(hw, crosses))
    return out


def place(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> Placement:
    """Every rank of one replica of ``sc`` on ``hw``: stage, layers, node, weight and KV bytes."""
    from planner.estimate import memory  # the memory plan imports resolve, which calls check_layout

    plan = memory.plan_memory(model, hw, sc, suggest=False)
    res = plan.resolved
    stages = memory.stage_layers(model.num_layers, res.pp)
    weights = memory.stage_weight_bytes(model, res)
    blocks = max(0, plan.num_gpu_blocks)
    links, tp_kind = stage_links(hw, sc), tp_link(hw, sc).kind
    nodes = num_nodes(hw, sc)
    per_pod = sc.gpus_per_replica // nodes
    experts = _expert_ranges(model, res.ep) if res.ep > 1 else None
    fullest = max((stop - start for start, stop in experts), default=0) if experts else 0
    stage_rows, rank_rows = [], []
    for k, layers in enumerate(stages):
        layout = memory.stage_kv_layout(model, res, layers)
        per_expert = memory.expert_bytes_per_rank_expert(model, res, layers) if experts else 0.0
        ranks = [d * res.tp * res.pp + k * res.tp + j for d in range(res.dp) for j in range(res.tp)]
        stage_rows.append(
            StagePlacement(
                stage=k,
                layer_start=layers.start,
                layer_stop=layers.stop,
                ranks=ranks,
                nodes=sorted({node_of(r, per_pod) for r in ranks}),
                tp_link=tp_kind,
                send_link=links[k].kind if k < len(links) else None,
            )
        )
        for d in range(res.dp):  # each DP rank's copy of the stage (one when dp is 1)
            for j in range(res.tp):
                rank = d * res.tp * res.pp + k * res.tp + j
                rank_rows.append(
                    RankPlacement(
                        rank=rank,
                        stage=k,
                        tp_rank=j,
                        node=node_of(rank, per_pod),
                        layer_start=layers.start,
                        layer_stop=layers.stop,
                        holds_embedding=k == 0,
                        holds_lm_head=k == len(stages) - 1,
                        weight_bytes=weights[k] - _fewer_experts_bytes(experts, d * res.tp + j, fullest, per_expert),
                        kv_cache_bytes=blocks * layout.bytes_per_block,
                        kv_bytes_per_token=layout.bytes_per_token,
                        dp_rank=d if res.dp > 1 else None,
                        ep_rank=d * res.tp + j if experts else None,
                        experts=experts[d * res.tp + j] if experts else None,
                    )
                )
    rank_rows.sort(key=lambda r: r.rank)
    ep_on = res.ep > 1
    return Placement(
        tp=res.tp,
        pp=res.pp,
        num_nodes=nodes,
        gpus_per_node=hw.host_gpus,
        gpus_per_pod=per_pod,
        nvlink_domain_gpus=hw.gpus_per_node,
        stages=stage_rows,
        ranks=rank_rows,
        weight_bytes_total=sum(r.weight_bytes for r in rank_rows),
        kv_cache_bytes_total=sum(r.kv_cache_bytes for r in rank_rows),
        data_parallel_size=res.dp if res.dp > 1 else None,
        ep=res.ep if ep_on else None,
        ep_link=ep_link(hw, sc).kind if ep_on else None,
    )


def _fewer_experts_bytes(experts: list[tuple[int, int]] | None, ep_rank: int, fullest: int, per_expert: float) -> int:
    """Weight bytes an EP rank holds less than the fullest one (the plan's figure): its missing experts' bytes."""
    if not experts:
        return 0
    start, stop = experts[ep_rank]
    return int((fullest - (stop - start)) * per_expert)


def ep_link(hw: HardwareProfile, sc: Scenario) -> Link:
    """The link of the expert dispatch/combine: the EP group's tp x dp GPUs inside one NVLink domain, or the
    network when they leave it (``Link.for_group``)."""
    return Link.for_group(hw, sc.tp * sc.data_parallel_size)


def _expert_ranges(model: ModelSpec, ep: int) -> list[tuple[int, int]]:
    """[first, one past the last] routed expert of each EP rank under vLLM's linear expert map
    (``determine_expert_map``: E // ep each, one more on the first E % ep ranks). DeepSeek-V3 (256) at EP 8:
    32 each, (0, 32), (32, 64), ...; 10 experts at EP 4: (0, 3), (3, 6), (6, 8), (8, 10)."""
    E = max(getattr(layer.ffn, "num_experts", 0) for layer in model.layers if layer.ffn is not None)
    base, extra = divmod(E, ep)
    out = []
    for r in range(ep):
        start = r * base + min(r, extra)
        out.append((start, start + base + (1 if r < extra else 0)))
    return out
