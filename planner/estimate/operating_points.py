"""Operating points: the latency- and throughput-tuned vLLM limits of one scenario, with their estimates.

Two serving profiles, after vLLM's own tuning advice (docs/configuration/optimization.md: a smaller
``max_num_batched_tokens`` gives better inter-token latency, a larger one better throughput):

* **latency** (online serving): ``max_num_seqs`` is the largest power-of-two batch whose
  estimated TPOT stays within ``LATENCY_TPOT_SLACK`` (25 %) of batch 1, but at least
  ``LATENCY_MIN_NUM_SEQS`` (8), and capped by what the KV cache holds at the workload's lengths;
  chunked prefill with a 2,048-token step budget, so a long prompt never stalls the running
  decodes for long.
* **throughput** (offline / batch): ``max_num_seqs`` as high as the KV cache holds requests of
  the workload's length (at most vLLM's default cap, 1,024 or 256), and a 16,384-token step
  budget so prefills run as large GEMMs.

Flags the user set explicitly (``--max-num-seqs``, ``--max-num-batched-tokens``) win over both. The
Latency page marks these two points on its curves and ``planner.deploy.export`` writes one config
per profile; both read them from here.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.engine import DEFAULT_ENGINE, ENGINE_NAMES, resolve_engine
from planner.estimate import multimodal
from planner.estimate.latency import LatencyEstimate, estimate_latency
from planner.estimate.memory import MemoryPlan, plan_memory
from planner.estimate.resolve import batch_defaults, resolve
from planner.estimate.roofline import efficiency_for
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.units import fmt_seconds

Profile = Literal["latency", "throughput"]
PROFILES: tuple[str, ...] = get_args(Profile)

LATENCY_TPOT_SLACK = 1.25
"""The latency profile keeps TPOT within this factor of its batch-1 value."""
LATENCY_MAX_NUM_SEQS = 256
LATENCY_MIN_NUM_SEQS = 8
"""The latency profile's floor on max-num-seqs (when the KV cache holds that many requests).

The TPOT rule alone picks 1 or 2 for MoE models (Mixtral, Qwen3-30B-A3B, Jamba, DeepSeek-V3): each
extra sequence in a decode step routes to other experts, so the step reads more expert weights and
TPOT rises past the 25 % slack at batch 2. But a server with max-num-seqs 1 queues every concurrent
request behind the running one, so its time to first token grows with the queue: that is not a
latency deployment, it is a single-user one. 8 is the batch vLLM's own latency benchmark measures
by default (``vllm bench latency --batch-size``, vllm/benchmarks/latency.py, default 8), the smallest
concurrency a latency-tuned online server is measured at."""
LATENCY_BATCHED_TOKENS = 2048
THROUGHPUT_BATCHED_TOKENS = 16384


class ServingProfile(BaseModel):
    """One operating point: the vLLM limits chosen for it, and what the planner expects of it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: Profile = Field(description="latency (online serving) or throughput (offline / batch).")
    purpose: str = Field(description="One line: what the profile is for.")
    rule: str = Field(description="How max_num_seqs and max_num_batched_tokens were chosen, with the numbers.")
    max_num_seqs: int = Field(ge=1, description="vLLM --max-num-seqs of this profile (sequences per step).")
    max_num_batched_tokens: int = Field(
        ge=1, description="vLLM --max-num-batched-tokens of this profile (tokens per step)."
    )
    enable_chunked_prefill: bool = Field(description="vLLM --enable-chunked-prefill.")
    scenario: Scenario = Field(description="The full scenario of this profile (the user's, with the limits above).")
    plan: MemoryPlan = Field(description="Memory plan of the profile's scenario.")
    latency: LatencyEstimate = Field(
        description="Static-batch latency at batch = max_num_seqs and the workload's lengths."
    )


def _tokens_per_request(model: ModelSpec, sc: Scenario, max_model_len: int) -> int:
    """KV tokens one request holds at its end: its prompt (the text and its images' tokens) and its output."""
    prompt = multimodal.prompt_tokens(model, sc, sc.workload.input_len)
    return max(1, min(prompt + sc.workload.output_len, max_model_len))


def _with_limits(sc: Scenario, seqs: int, tokens: int) -> Scenario:
    return sc.model_copy(
        update={
            "max_num_seqs": seqs,
            "max_num_batched_tokens": tokens,
            "workload": sc.workload.model_copy(update={"batch_size": seqs}),
        }
    )


def _legal_budget(tokens: int, seqs: int, chunked: bool, max_model_len: int) -> int:
    """vLLM requires max_num_batched_tokens >= max_num_seqs, and >= max_model_len without chunked prefill."""
    tokens = max(tokens, seqs)
    return tokens if chunked else max(tokens, max_model_len)


def _finish(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    eff: Efficiency,
    profile: Profile,
    purpose: str,
    rule: str,
    seqs: int,
    tokens: int,
    chunked: bool,
    draft_model: ModelSpec | None = None,
) -> ServingProfile:
    final = _with_limits(sc, seqs, tokens)
    return ServingProfile(
        profile=profile,
        purpose=purpose,
        rule=rule,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        enable_chunked_prefill=chunked,
        scenario=final,
        plan=plan_memory(model, hw, final),
        latency=estimate_latency(model, hw, final, batch_size=seqs, efficiency=eff, draft_model=draft_model),
    )


def latency_profile(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    efficiency: Efficiency | None = None,
    draft_model: ModelSpec | None = None,
) -> ServingProfile:
    """Online serving: the largest power-of-two batch whose TPOT stays within 25 % of batch 1, at least
    ``LATENCY_MIN_NUM_SEQS`` (see there: a server of one request at a time is no latency profile) and at
    most what the KV cache holds."""
    eff = efficiency or efficiency_for(hw, sc=sc)
    tokens = sc.max_num_batched_tokens or LATENCY_BATCHED_TOKENS
    max_len = sc.max_model_len or model.max_position_embeddings  # as planner.estimate.resolve.resolve sets it
    chunked = resolve(model, hw, sc).enable_chunked_prefill  # the command's, else the engine's default
    start = sc.max_num_seqs or 1
    probe = plan_memory(
        model, hw, _with_limits(sc, start, _legal_budget(tokens, start, chunked, max_len)), suggest=False
    )
    per_request = _tokens_per_request(model, sc, max_len)
    if sc.max_num_seqs:
        seqs = sc.max_num_seqs
        rule = f"max-num-seqs {seqs} as given"
    else:
        fit = max(1, probe.kv_cache_tokens // per_request)
        cap = min(LATENCY_MAX_NUM_SEQS, fit)
        base = _with_limits(sc, 1, tokens)
        tpot_1 = estimate_latency(
            model, hw, base, batch_size=1, efficiency=eff, check_memory=False, draft_model=draft_model
        ).tpot_seconds
        seqs, batch = 1, 2
        while batch <= cap:
            tpot = estimate_latency(
                model, hw, base, batch_size=batch, efficiency=eff, check_memory=False, draft_model=draft_model
            ).tpot_seconds
            if tpot > LATENCY_TPOT_SLACK * tpot_1:
                break
            seqs, batch = batch, batch * 2
        floor = min(LATENCY_MIN_NUM_SEQS, cap)
        rule = (
            f"max-num-seqs {max(seqs, floor)}: the largest power-of-two batch whose TPOT stays within "
            f"{LATENCY_TPOT_SLACK:g} x batch 1 ({fmt_seconds(tpot_1)}) is {seqs}; at least {floor} (a latency "
            f"server still takes concurrent requests; vllm bench latency measures batch {LATENCY_MIN_NUM_SEQS}), "
            f"capped at {cap} (the smaller of {LATENCY_MAX_NUM_SEQS} and the {fit:,} requests of "
            f"{per_request:,} tokens the KV cache holds)"
        )
        seqs = max(seqs, floor)
    legal = _legal_budget(tokens, seqs, chunked, max_len)
    source = "as given" if sc.max_num_batched_tokens else "small step budget: short decode stalls behind prefill chunks"
    rule += f"; max-num-batched-tokens {legal:,} ({source})"
    return _finish(
        model,
        hw,
        sc,
        eff,
        "latency",
        "online serving: low TTFT and TPOT per request",
        rule,
        seqs,
        legal,
        chunked,
        draft_model,
    )


def throughput_profile(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    efficiency: Efficiency | None = None,
    draft_model: ModelSpec | None = None,
) -> ServingProfile:
    """Offline serving: as many sequences as the KV cache holds at the workload's lengths."""
    eff = efficiency or efficiency_for(hw, sc=sc)
    engine, version = resolve_engine(sc.engine_version or DEFAULT_ENGINE)
    default_tokens, _ = batch_defaults(hw, engine, version)
    # the engine's own sequence limit (SGLang's request slots sized from its pool, TensorRT-LLM's batch size; the
    # command's when it sets one) and its chunked prefill (the command's, else the engine's default)
    base = plan_memory(model, hw, sc, suggest=False).resolved
    default_seqs, chunked = base.max_num_seqs, base.enable_chunked_prefill
    tokens = sc.max_num_batched_tokens or max(THROUGHPUT_BATCHED_TOKENS, default_tokens)
    max_len = sc.max_model_len or model.max_position_embeddings
    probe = plan_memory(
        model, hw, _with_limits(sc, default_seqs, _legal_budget(tokens, default_seqs, chunked, max_len)), suggest=False
    )
    per_request = _tokens_per_request(model, sc, max_len)
    if sc.max_num_seqs:
        seqs = sc.max_num_seqs
        rule = f"max-num-seqs {seqs} as given"
    else:

        def fits_at(seqs: int) -> int:  # requests the KV cache holds with this many sequences' logits reserved
            plan = plan_memory(
                model, hw, _with_limits(sc, seqs, _legal_budget(tokens, seqs, chunked, max_len)), suggest=False
            )
            return plan.kv_cache_tokens // per_request

        fit = probe.kv_cache_tokens // per_request
        seqs = max(1, min(default_seqs, fit))
        if seqs < default_seqs:  # fewer sequences reserve less sampler memory: one refinement step
            again = max(1, min(default_seqs, fits_at(seqs)))
            fit_again = fits_at(again) if again > seqs else 0
            if fit_again >= again > seqs:
                seqs, fit = again, fit_again
        rule = (
            f"max-num-seqs {seqs}: the {fit:,} requests of {per_request:,} tokens the KV cache holds, "
            f"at most {ENGINE_NAMES[engine.engine]}'s default {default_seqs}"
        )
    legal = _legal_budget(tokens, seqs, chunked, max_len)
    source = "as given" if sc.max_num_batched_tokens else "large step budget: prefills run as large GEMMs"
    rule += f"; max-num-batched-tokens {legal:,} ({source})"
    return _finish(
        model,
        hw,
        sc,
        eff,
        "throughput",
        "offline / batch serving: most tokens per second per GPU",
        rule,
        seqs,
        legal,
        chunked,
        draft_model,
    )
