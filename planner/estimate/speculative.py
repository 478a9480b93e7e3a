"""Speculative decoding: how many tokens a step yields, what drafting and verifying cost, and where it stops paying.

vLLM's ``--speculative-config`` (``{"method": "eagle3", "model": ..., "num_speculative_tokens": k}``) makes
every decode step propose ``k`` draft tokens per sequence and verify them in one target forward of
``k + 1`` query tokens per sequence. With a per-token acceptance rate ``a`` (each draft token is
accepted given the ones before it were, independently; Leviathan et al. 2023, "Fast Inference from
Transformers via Speculative Decoding", eq. 1) a step yields

    E = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)      tokens per sequence

(the accepted prefix plus the target's own bonus or correction token). E is what vLLM logs as the
"mean acceptance length" (1 + accepted / drafts; vllm-project/vllm#26191 shows 16990 output tokens
over 4816 drafts with 12208 accepted: 1 + 12208 / 4816 = 3.53). Example: a = 0.7, k = 3 ->
(1 - 0.7^4) / 0.3 = 2.533 tokens per step.

One speculative step, on the same op rows and bounds as any other step (``planner.estimate.step``
through ``StepTimeModel``):

    draft   = k sequential one-token passes of the drafter at the batch (its GPU time):
              draft    -- the draft model's own decode step (its own ModelSpec, same card, TP and engine);
              eagle/eagle3/mtp -- one decoder layer of the target (its last layer's ops, the same rows the
                          target's step binds) plus the model's embedding, final norm, lm_head and sampler;
              ngram    -- 0 GPU seconds: vLLM's n-gram proposer matches the prompt on the host (CPU);
                          that host time is not modelled here.
    verify  = the target's step with k + 1 query tokens per sequence (causal among themselves, on the
              sequence's cached context), every one of them sampled (lm_head rows = batch x (k + 1)).
              A batch whose batch x (k + 1) tokens fit the largest captured size replays a FULL CUDA graph
              at the padded size: vLLM treats query length 1 + k as "uniform decode" and sets
              max_cudagraph_capture_size = min(max_num_seqs x (1 + k) x 2, 512) (shared/reference/engines.md 2).
    step    = combine(draft + verify, host work of the batch)   (async scheduling overlaps, else adds)
    TPOT    = step / E

At batch 1 the target's step is weight-bound, so verifying k + 1 tokens costs about one token and TPOT
approaches (step of one token + draft) / (k + 1). As the batch grows the verification's GEMMs turn
compute-bound, its cost grows ~(k + 1)x, and past the break-even batch speculation is slower than plain
decoding: ``break_even_batch`` is the smallest batch (searched over every batch up to max_num_seqs) at
which the speculative TPOT is no better than the plain one.

Left out, and said so: EAGLE's fusion projection (2h or 3h -> h) and EAGLE-3's reduced draft vocabulary
(its own smaller lm_head; the target's is used here, a conservative draft cost), the first draft pass's
extra tokens (it re-reads the accepted ones), tree speculation, and the acceptance rate's dependence on
the batch or position (one ``a`` for all). For MLA models, whose decode ops (absorbed) differ from their
prefill ops, verification is costed as (k + 1) one-token decodes: an upper bound on its attention.
Extra memory (the draft's weights and KV per token) is reported, not subtracted from the KV cache plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.errors import ScenarioError
from planner.estimate import step
from planner.estimate.memory import _group_bytes, plan_memory, stage_weight_bytes
from planner.estimate.resolve import resolve
from planner.estimate.roofline import PredictionKind, layer_groups
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario, SpeculativeDecoding

if TYPE_CHECKING:  # latency.py imports this module: the step model is imported where it is built
    from planner.efficiency import Efficiency
    from planner.estimate.latency import StepTimeModel

#: Ops of ``roofline.model_ops`` that run once per sampled position (every one of the k + 1 verified tokens).
SAMPLED_OPS = ("final_norm", "lm_head", "sampler")
#: vLLM's method name for each of the planner's (``SpeculativeConfig.method``; a draft model is "draft_model").
VLLM_METHOD = {"ngram": "ngram", "draft": "draft_model", "eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp"}
DRAFT_COST = {
    "ngram": "none on the GPU: n-gram prompt lookup runs on the host (not modelled)",
    "draft": "k decode steps of the draft model (its own config, same card, TP and engine)",
    "eagle": "k passes of one target decoder layer + embedding, final norm, lm_head and sampler",
    "eagle3": "k passes of one target decoder layer + embedding, final norm, lm_head and sampler",
    "mtp": "k passes of one target decoder layer (the MTP layer) + embedding, final norm, lm_head and sampler",
}


class SpeculativeEstimate(BaseModel):
    """What speculative decoding does to one decode step of a batch: tokens, seconds, speed-up, memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["ngram", "draft", "eagle", "eagle3", "mtp"] = Field(
        description="Who drafts (--speculative-method)."
    )
    num_speculative_tokens: int = Field(description="Draft tokens per step, k.")
    acceptance_rate: float = Field(description="Per-token acceptance rate a.")
    tokens_per_step: float = Field(description="Expected tokens per sequence per step, (1 - a^(k+1)) / (1 - a).")
    draft_seconds: float = Field(description="GPU time of drafting k tokens for the batch, seconds per step.")
    verify_seconds: float = Field(description="GPU time of the target's step over k + 1 tokens per sequence, seconds.")
    step_seconds: float = Field(
        description="Wall time of one speculative step (draft + verify, with host work), seconds."
    )
    tpot_seconds: float = Field(description="step_seconds / tokens_per_step: time per output token, seconds.")
    baseline_tpot_seconds: float = Field(description="TPOT of plain decoding at the same batch and context, seconds.")
    speedup: float = Field(description="baseline_tpot_seconds / tpot_seconds (> 1: speculation pays).")
    break_even_batch: int | None = Field(
        description="Smallest batch at which speculation no longer pays (TPOT >= plain); None: it pays at every batch "
        "up to break_even_searched_up_to."
    )
    break_even_searched_up_to: int = Field(
        description="Largest batch searched for the break-even: max_num_seqs, or the batches of this context the "
        "planned KV cache holds when fewer."
    )
    draft_weight_bytes_per_gpu: int = Field(description="Weights the drafter adds on each GPU, bytes (0 for ngram).")
    draft_kv_bytes_per_token: int = Field(
        description="KV cache the drafter adds per token on each GPU, bytes (0 for ngram); not subtracted from the "
        "plan."
    )
    draft_cost: str = Field(description="What the draft's cost is made of.")
    kind: PredictionKind = Field(description="bound, estimate or calibrated (the step model's factors).")


def expected_tokens_per_step(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """E = (1 - a^(k+1)) / (1 - a): tokens a sequence gains per verification step (1 at a = 0).

    Example: a = 0.8, k = 4 -> (1 - 0.8^5) / 0.2 = 3.362.
    """
    a, k = float(acceptance_rate), int(num_speculative_tokens)
    if a == 0.0:
        return 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def acceptance_rate_for_length(mean_acceptance_length: float, num_speculative_tokens: int) -> float:
    """The per-token rate a whose E equals a published mean acceptance length (bisection; E rises with a).

    Example: vLLM's EAGLE-3 on Llama-3.1-8B, k = 3, mean acceptance length 2.79 -> a = 0.722.
    """
    k = int(num_speculative_tokens)
    if not 1.0 <= mean_acceptance_length < k + 1:
        raise ScenarioError(
            f"a mean acceptance length of {mean_acceptance_length:g} is impossible with k = {k}.",
            hint=f"It lies in [1, {k + 1}) (the k drafts plus one token of the target's).",
        )
    lo, hi = 0.0, 1.0
    for _ in range(60):  # 2^-60: exact to a double
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens_per_step(mid, k) < mean_acceptance_length else (lo, mid)
    return (lo + hi) / 2


def _features(batch: np.ndarray, query: int, context: np.ndarray, sampled: bool = False) -> np.ndarray:
    """Step features (5, N) of ``batch`` sequences each adding ``query`` tokens on a context of ``context``
    tokens (the new ones included): ``latency._prefill_features`` per sequence; ``sampled`` counts every
    query token as a sequence (the rows that run per sampled position)."""
    q = float(query)
    pairs = q * (context - q) + q * (q + 1) / 2
    seqs = batch * q if sampled else batch
    return np.stack([np.ones_like(batch), batch * q, seqs, batch * pairs, batch * context])


class SpeculativeStepModel:
    """Seconds of a speculative decode step (draft + verification) for any batch and context, vectorized.

    Built on a target ``StepTimeModel`` (and, for a draft model, the draft's own); every op is bound by
    the same ``gpu_seconds`` as a plain step, so speculation off and on are costed alike.
    """

    def __init__(
        self, target: StepTimeModel, model: ModelSpec, config: SpeculativeDecoding, draft: StepTimeModel | None = None
    ):
        if config.method == "draft" and draft is None:
            raise ScenarioError(
                "--speculative-method draft needs the draft model's spec to cost its steps.",
                hint="Pass --draft-model MODEL (the CLI loads it), or build the draft's StepTimeModel.",
            )
        self.target, self.model, self.config, self.draft = target, model, config, draft
        self.k = config.num_speculative_tokens
        self.tokens_per_step = expected_tokens_per_step(config.acceptance_rate, self.k)
        table = target.prefill_table if target.shared else target.decode_table
        self.verify_table = table
        model_rows = [i for i, owner in enumerate(table.owner) if owner is None]
        self.sampled_rows = np.asarray([i for i in model_rows if table.names[i] in SAMPLED_OPS], dtype=np.int64)
        self.unsampled_rows = np.setdiff1d(np.arange(table.n), self.sampled_rows)
        head = self._head_layer(model)
        dec = target.decode_table
        self.head_layer_rows = np.asarray([i for i, owner in enumerate(dec.owner) if owner is head], dtype=np.int64)
        self.head_model_rows = np.asarray([i for i, owner in enumerate(dec.owner) if owner is None], dtype=np.int64)

    @staticmethod
    def _head_layer(model: ModelSpec):
        """The layer object an EAGLE/MTP head is sized as: the group holding the model's last layer."""
        last = model.num_layers - 1
        idx = next(idx for _, idx in layer_groups(model) if last in idx)
        return model.layers[idx[0]]

    # ------------------------------------------------------------------------------- parts

    def verify_gpu_seconds(self, batch, context) -> np.ndarray:
        """GPU seconds of the target's step over k + 1 query tokens per sequence (FULL graph when it fits)."""
        t = self.target
        q = self.k + 1
        B, C = np.broadcast_arrays(np.atleast_1d(np.asarray(batch, float)), np.atleast_1d(np.asarray(context, float)))
        cap = t.engine.max_cuda_graph_batch
        captured = np.logical_and(t.graphs, B * q <= cap)
        run = np.where(captured, np.ceil(np.asarray(step.graph_padded_batch(B * q, cap), float) / q), B)
        full, pw = step.decode_graph_flags(captured, t.full_graphs)
        if t.shared:
            f0, f1 = _features(run, q, C), _features(run, q, C, sampled=True)
            k0, l0 = t.gpu_seconds(self.verify_table, f0, full, rows=self.unsampled_rows, piecewise=pw)
            k1, l1 = t.gpu_seconds(self.verify_table, f1, full, rows=self.sampled_rows, piecewise=pw)
            kernels, launches = np.asarray(k0) + k1, np.asarray(l0) + l1
        else:  # MLA: (k + 1) one-token decodes per sequence, an upper bound on the attention
            seqs = run * q
            kernels, launches = t.gpu_seconds(self.verify_table, _features(seqs, 1, C), full, piecewise=pw)
        return np.asarray(step.gpu_step_seconds(np.asarray(kernels, float), np.asarray(launches, float)), float)

    def draft_gpu_seconds(self, batch, context) -> np.ndarray:
        """GPU seconds of drafting k tokens for each of ``batch`` sequences: k one-token passes of the drafter."""
        B, C = np.broadcast_arrays(np.atleast_1d(np.asarray(batch, float)), np.atleast_1d(np.asarray(context, float)))
        if self.config.method == "ngram":
            return np.zeros_like(B)
        drafter = self.draft if self.draft is not None else self.target
        cap = drafter.engine.max_cuda_graph_batch
        captured = np.logical_and(drafter.graphs, cap >= B)
        run = np.where(captured, np.asarray(step.graph_padded_batch(B, cap), float), B)
        graphs, pw = step.decode_graph_flags(captured, drafter.full_graphs)
        f = _features(run, 1, C)
        table = drafter.decode_table
        if self.draft is not None:
            kernels, launches = drafter.gpu_seconds(table, f, graphs, piecewise=pw)
        else:
            layers = table.count[self.head_layer_rows[0]]
            k0, l0 = drafter.gpu_seconds(table, f, graphs, rows=self.head_layer_rows, piecewise=pw)
            k1, l1 = drafter.gpu_seconds(table, f, graphs, rows=self.head_model_rows, piecewise=pw)
            kernels, launches = np.asarray(k0) / layers + k1, np.asarray(l0) / layers + l1
        one_pass = step.gpu_step_seconds(np.asarray(kernels, float), np.asarray(launches, float))
        return self.k * np.asarray(one_pass, float)

    def step_seconds(self, batch, context) -> np.ndarray:
        """Wall time of one speculative step: draft + verify on the GPU, combined with the batch's host work."""
        B = np.atleast_1d(np.asarray(batch, float))
        gpu = self.draft_gpu_seconds(batch, context) + self.verify_gpu_seconds(batch, context)
        t = self.target
        return np.asarray(step.combine_step(gpu, step.host_seconds(t.eff, B), t.engine.async_scheduling), float)

    def tpot_seconds(self, batch, context) -> np.ndarray:
        """Time per output token with speculation: step seconds / expected tokens per step."""
        return self.step_seconds(batch, context) / self.tokens_per_step

    def break_even_batch(self, context: float, max_batch: int) -> int | None:
        """Smallest batch in 1..max_batch at which speculative TPOT >= plain TPOT (None: it pays at all of them)."""
        batches = np.arange(1, max(int(max_batch), 1) + 1, dtype=float)
        contexts = np.full_like(batches, float(context))
        plain = np.atleast_1d(np.asarray(self.target.decode_seconds(batches, contexts), float))
        worse = np.nonzero(self.tpot_seconds(batches, contexts) >= plain)[0]
        return int(batches[worse[0]]) if len(worse) else None


# --------------------------------------------------------------------------------- memory


def draft_scenario(sc: Scenario) -> Scenario:
    """The scenario a draft model runs in: the target's card, TP, KV dtype and engine; its own weights and length.
    One DP rank's engine, without expert parallelism (a draft model is dense, and each DP rank drafts its own
    batch: vLLM builds the drafter per engine)."""
    return sc.model_copy(
        update={
            "speculative": None,
            "weight_dtype": "auto",
            "precision_overrides": {},
            "pp": 1,
            "num_gpus": None,
            "max_model_len": None,
            "enable_expert_parallel": False,
            "data_parallel_size": 1,
        }
    )


def draft_memory(model: ModelSpec, hw: HardwareProfile, sc: Scenario, draft_model: ModelSpec | None) -> tuple[int, int]:
    """(weight bytes, KV bytes per token) the drafter adds on each GPU.

    A draft model: its own weights (at its checkpoint's precision) and KV over all its layers; an EAGLE /
    MTP head: one decoder layer's weights (sharing the target's embedding and lm_head, as vLLM loads them)
    and that layer's KV; n-gram: nothing.
    """
    cfg = sc.speculative
    if cfg is None or cfg.method == "ngram":
        return 0, 0
    if draft_model is not None:
        res = resolve(draft_model, hw, draft_scenario(sc))
        kv_per_token = draft_model.kv_bytes_per_token(res.kv_bytes_per_element, res.tp)
        return stage_weight_bytes(draft_model, res)[0], int(kv_per_token)
    res = resolve(model, hw, sc)
    head = SpeculativeStepModel._head_layer(model)
    weights = int(_group_bytes(head.param_groups(), res, res.tp))
    kv = model.kv_specs(res.tp, res.kv_bytes_per_element)[model.layers.index(head)].bytes_per_token
    return weights, int(kv)


# ------------------------------------------------------------------------------- estimate


def speculative_step_model(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    efficiency: Efficiency | None = None,
    draft_model: ModelSpec | None = None,
    target: StepTimeModel | None = None,
) -> SpeculativeStepModel:
    """The speculative step model of ``sc.speculative`` (the draft model's StepTimeModel built when it has one)."""
    from planner.estimate.latency import StepTimeModel

    if sc.speculative is None:
        raise ScenarioError("no speculative decoding in this scenario.", hint="Set --speculative-method and its flags.")
    target = target or StepTimeModel(model, hw, sc, efficiency)
    draft = None
    if sc.speculative.method == "draft":
        if draft_model is None:
            raise ScenarioError(
                f"--draft-model {sc.speculative.draft_model} was named but its config was not loaded.",
                hint="Pass the draft's ModelSpec (the CLI loads it from --draft-model).",
            )
        draft = StepTimeModel(draft_model, hw, draft_scenario(sc), target.eff)
    return SpeculativeStepModel(target, model, sc.speculative, draft)


def estimate_speculation(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    batch: int,
    context: int,
    efficiency: Efficiency | None = None,
    draft_model: ModelSpec | None = None,
    target: StepTimeModel | None = None,
) -> SpeculativeEstimate:
    """Speculative decoding at ``batch`` sequences of ``context`` tokens: tokens, seconds, speed-up, break-even."""
    spec = speculative_step_model(model, hw, sc, efficiency, draft_model, target)
    t = spec.target
    draft = float(spec.draft_gpu_seconds(batch, context)[0])
    verify = float(spec.verify_gpu_seconds(batch, context)[0])
    wall = float(spec.step_seconds(batch, context)[0])
    plain = float(t.decode_seconds(float(batch), float(context)))
    tpot = wall / spec.tokens_per_step
    limit = search_limit(model, hw, sc, context)
    weights, kv = draft_memory(model, hw, sc, draft_model)
    cfg = sc.speculative
    assert cfg is not None  # speculative_step_model refused a scenario without it
    return SpeculativeEstimate(
        method=cfg.method,
        num_speculative_tokens=cfg.num_speculative_tokens,
        acceptance_rate=cfg.acceptance_rate,
        tokens_per_step=spec.tokens_per_step,
        draft_seconds=draft,
        verify_seconds=verify,
        step_seconds=wall,
        tpot_seconds=tpot,
        baseline_tpot_seconds=plain,
        speedup=plain / tpot,
        break_even_batch=spec.break_even_batch(context, limit),
        break_even_searched_up_to=limit,
        draft_weight_bytes_per_gpu=weights,
        draft_kv_bytes_per_token=kv,
        draft_cost=DRAFT_COST[cfg.method],
        kind=t.kind,
    )


def search_limit(model: ModelSpec, hw: HardwareProfile, sc: Scenario, context: int) -> int:
    """Largest batch worth searching: max_num_seqs, or fewer when the KV cache holds fewer sequences of ``context``
    tokens (a batch vLLM could not run would make the break-even meaningless)."""
    plan = plan_memory(model, hw, sc, suggest=False)
    limit = plan.resolved.max_num_seqs
    if plan.fits and plan.kv_cache_tokens:
        limit = min(limit, max(1, plan.kv_cache_tokens // max(int(context), 1)))
    return limit


def vllm_speculative_config(config: SpeculativeDecoding) -> dict[str, object]:
    """vLLM's ``--speculative-config`` JSON for ``config`` (``SpeculativeConfig`` in vllm/config/speculative.py).

    ``model`` is the draft model or the EAGLE head's checkpoint (vLLM refuses eagle / eagle3 / draft_model
    without one: "num_speculative_tokens was provided but without speculative model"); MTP takes none (vLLM
    uses the target's own checkpoint, whose MTP layer it loads); n-gram takes none and vLLM sets
    ``prompt_lookup_min = prompt_lookup_max = 5`` when neither is given.
    """
    out: dict[str, object] = {
        "method": VLLM_METHOD[config.method],
        "num_speculative_tokens": config.num_speculative_tokens,
    }
    if config.method in ("draft", "eagle", "eagle3"):
        if config.draft_model is None:
            raise ScenarioError(
                f"vLLM needs the {config.method} head's checkpoint for --speculative-config.",
                hint="Name it with --draft-model, e.g. --draft-model yuhuili/EAGLE3-LLaMA3.1-Instruct-8B.",
            )
        out["model"] = config.draft_model
    return out
