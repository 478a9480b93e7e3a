"""Workload: which requests arrive when, and how long their prompts and answers are.

A ``Workload`` is the user's description of traffic: an arrival process (Poisson at a rate, a
closed loop at a fixed concurrency, or a recorded trace), the number of requests, input and output
length distributions, the prefix-cache hit rate and a seed. ``generate_requests`` turns it into
plain numpy arrays (``RequestSet``) that the simulator consumes; the same seed gives the same
arrays, bit for bit.

Arrivals follow ``vllm bench serve``: the first request is sent at t = 0 and the gaps between
requests are exponential with mean 1 / rate (a Poisson process). In a closed loop the first
``concurrency`` requests are sent at t = 0 and each later one when an earlier one finishes, like
``vllm bench serve --max-concurrency N`` with an infinite rate. Both at once (a rate and
``max_concurrency``): Poisson arrivals at the client, each sent only when fewer than the cap are in
flight, its latencies counted from the send, as ``vllm bench serve`` gates each request on a
semaphore of the cap before it starts its clock.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.errors import ConfigError, ScenarioError
from planner.scenario import MAX_IMAGE_SIDE, MAX_IMAGES_PER_REQUEST, MAX_TOKENS, image_size_text

_SPEC = ConfigDict(frozen=True, extra="forbid")

#: Most requests one simulation takes: 1,000,000. Memory and time grow with the requests: measured on a
#: 2-core machine, 100,000 requests (Llama-3.1-8B, 50 req/s, 256 in / 64 out) took 83 s and 58 MB above
#: the 77 MB of a 100-request run, so the bound is ~15 minutes and ~0.6 GB; 10^9 would be gigabytes before
#: the first step. A longer run is a longer trace or several seeds.
MAX_REQUESTS = 1_000_000
#: Largest seed: numpy's generators take any integer >= 0; 2^64 - 1 bounds the text a seed can be.
MAX_SEED = 2**64 - 1

# ---------------------------------------------------------------------------------------------
# Length distributions: each variant draws ``n`` whole token counts >= 1 from a numpy Generator.
# ---------------------------------------------------------------------------------------------


class FixedLength(BaseModel):
    """Every request has the same length."""

    model_config = _SPEC
    kind: Literal["fixed"] = Field("fixed", description="Distribution name.")
    tokens: int = Field(
        ..., ge=1, le=MAX_TOKENS, description=f"Length of every request, in tokens (1 to {MAX_TOKENS:,})."
    )

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` copies of ``tokens`` (the generator is not advanced)."""
        return np.full(n, self.tokens, dtype=np.int64)


class UniformLength(BaseModel):
    """Whole numbers drawn uniformly from [low_tokens, high_tokens], both ends included."""

    model_config = _SPEC
    kind: Literal["uniform"] = Field("uniform", description="Distribution name.")
    low_tokens: int = Field(..., ge=1, le=MAX_TOKENS, description="Shortest length, in tokens (included).")
    high_tokens: int = Field(
        ..., ge=1, le=MAX_TOKENS, description=f"Longest length, in tokens (included; at most {MAX_TOKENS:,})."
    )

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high_tokens < self.low_tokens:
            raise ScenarioError(
                f"uniform length: high_tokens={self.high_tokens} is below low_tokens={self.low_tokens}.",
                hint="Swap the two bounds.",
            )
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.low_tokens, self.high_tokens + 1, size=n, dtype=np.int64)


class NormalLength(BaseModel):
    """Normal with the given mean and standard deviation, rounded to whole tokens, clipped to >= 1."""

    model_config = _SPEC
    kind: Literal["normal"] = Field("normal", description="Distribution name.")
    mean_tokens: float = Field(
        ...,
        gt=0,
        le=MAX_TOKENS,
        allow_inf_nan=False,
        description=f"Mean length before rounding and clipping, in tokens (at most {MAX_TOKENS:,}).",
    )
    std_tokens: float = Field(
        ..., ge=0, le=MAX_TOKENS, allow_inf_nan=False, description="Standard deviation of the length, in tokens."
    )

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        draws = rng.normal(self.mean_tokens, self.std_tokens, size=n)
        return np.maximum(np.rint(draws), 1).astype(np.int64)


class LognormalLength(BaseModel):
    """Log-normal whose own mean and standard deviation (not those of its log) are given.

    With m = mean_tokens and s = std_tokens the underlying normal has
    sigma^2 = ln(1 + s^2 / m^2) and mu = ln(m) - sigma^2 / 2, so E[X] = m and SD[X] = s.
    Example: m = 256, s = 256 gives sigma = 0.833, mu = 5.198; the median is e^mu = 181 tokens.
    Draws are rounded to whole tokens and clipped to >= 1.
    """

    model_config = _SPEC
    kind: Literal["lognormal"] = Field("lognormal", description="Distribution name.")
    mean_tokens: float = Field(
        ..., gt=0, le=MAX_TOKENS, allow_inf_nan=False, description=f"Mean length, in tokens (at most {MAX_TOKENS:,})."
    )
    std_tokens: float = Field(
        ..., ge=0, le=MAX_TOKENS, allow_inf_nan=False, description="Standard deviation of the length, in tokens."
    )

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        sigma2 = math.log1p((self.std_tokens / self.mean_tokens) ** 2)
        mu = math.log(self.mean_tokens) - sigma2 / 2
        draws = rng.lognormal(mu, math.sqrt(sigma2), size=n)
        return np.maximum(np.rint(draws), 1).astype(np.int64)


class EmpiricalLength(BaseModel):
    """Lengths drawn with replacement, equally likely, from a list (e.g. a dataset's histogram)."""

    model_config = _SPEC
    kind: Literal["empirical"] = Field("empirical", description="Distribution name.")
    values_tokens: tuple[Annotated[int, Field(ge=1, le=MAX_TOKENS)], ...] = Field(
        ...,
        min_length=1,
        max_length=MAX_REQUESTS,
        description=f"Observed lengths to draw from, in tokens (each 1 to {MAX_TOKENS:,}; at most {MAX_REQUESTS:,}).",
    )

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        values = np.asarray(self.values_tokens, dtype=np.int64)
        return values[rng.integers(0, len(values), size=n)]


LengthDistribution = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength | EmpiricalLength,
    Field(discriminator="kind"),
]

# ---------------------------------------------------------------------------------------------
# Arrival processes.
# ---------------------------------------------------------------------------------------------


class PoissonArrivals(BaseModel):
    """Open loop: requests arrive as a Poisson process, whatever the server's state."""

    model_config = _SPEC
    kind: Literal["poisson"] = Field("poisson", description="Arrival process name.")
    request_rate_per_s: float = Field(
        1.0, gt=0, allow_inf_nan=False, description="Mean arrival rate, in requests per second."
    )
    max_concurrency: int | None = Field(
        None,
        ge=1,
        le=MAX_REQUESTS,
        exclude_if=lambda v: v is None,
        description="Most requests in flight at once (vllm bench serve --max-concurrency with a rate): a request "
        "that arrives while that many are in flight waits at the client, and its latencies count from when "
        "it is sent; None: no cap.",
    )


class ConcurrencyArrivals(BaseModel):
    """Closed loop: ``concurrency`` requests in flight; a new one arrives when one finishes."""

    model_config = _SPEC
    kind: Literal["concurrency"] = Field("concurrency", description="Arrival process name.")
    concurrency: int = Field(
        8,
        ge=1,
        le=MAX_REQUESTS,
        description=f"Requests in flight at once (queued or running), a count from 1 to {MAX_REQUESTS:,}.",
    )


class TraceArrivals(BaseModel):
    """Replay a recorded trace: arrival times and both lengths come from the file."""

    model_config = _SPEC
    kind: Literal["trace"] = Field("trace", description="Arrival process name.")
    path: str = Field(
        ...,
        description="CSV or JSONL file with columns arrival_time_s (seconds), input_tokens and "
        "output_tokens (tokens); see load_trace.",
    )


Arrivals = Annotated[PoissonArrivals | ConcurrencyArrivals | TraceArrivals, Field(discriminator="kind")]


# ---------------------------------------------------------------------------------------------
# Request classes: traffic of several kinds at once (short chat and long documents, say).
# ---------------------------------------------------------------------------------------------

#: Most classes one workload may have (each is a Poisson stream of its own; real mixes have a handful).
MAX_CLASSES = 32


class SharedPrefix(BaseModel):
    """A system prompt the class's requests start with: ``prompts`` distinct ones of ``tokens`` tokens each.

    Each request draws one of the prompts uniformly; the first request to use a prompt computes it, and
    every later one finds its whole blocks in the prefix cache (vLLM's automatic prefix caching: full
    blocks only, and never the request's last prompt token). Eviction is not modelled: a shared prompt,
    once computed, stays cached (LRU keeps hot prefixes; a KV cache too small for them is not modelled).
    """

    model_config = _SPEC
    tokens: int = Field(..., ge=1, le=MAX_TOKENS, description="Tokens of each shared system prompt.")
    prompts: int = Field(
        1, ge=1, le=MAX_REQUESTS, description="Distinct system prompts the class's requests share, a count."
    )


class RequestClass(BaseModel):
    """One kind of request: its own Poisson rate, count, lengths, priority and shared prefix."""

    model_config = _SPEC
    name: str = Field(
        ...,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Class name (letters, digits, _ . -).",
    )
    request_rate_per_s: float = Field(
        ..., gt=0, allow_inf_nan=False, description="Mean Poisson arrival rate of this class, requests per second."
    )
    num_requests: int = Field(..., ge=1, le=MAX_REQUESTS, description="Requests of this class, a count.")
    input_tokens: LengthDistribution = Field(
        default_factory=lambda: FixedLength(tokens=1024),
        description="Prompt length after the shared prefix (if any), in tokens.",
    )
    output_tokens: LengthDistribution = Field(
        default_factory=lambda: FixedLength(tokens=128), description="Generated length distribution, in tokens."
    )
    priority: int = Field(
        0,
        ge=-(2**31),
        le=2**31 - 1,
        description="vLLM --scheduling-policy priority: lower values are scheduled first (ties by arrival); "
        "ignored under fcfs.",
    )
    shared_prefix: SharedPrefix | None = Field(
        None, description="System prompt(s) every request of the class starts with; None: no shared prefix."
    )
    images_per_request: int = Field(
        0,
        ge=0,
        le=MAX_IMAGES_PER_REQUEST,
        exclude_if=lambda v: v == 0,
        description=f"Images each request of the class carries, 0 to {MAX_IMAGES_PER_REQUEST} (as "
        "--images-per-request): their tokens join the prompt and the vision encoder runs in the step that schedules "
        "them.",
    )
    image_size: tuple[int, int] | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description=f"Width and height of the class's images in pixels, 1 to {MAX_IMAGE_SIDE:,} each, as 'WxH' or "
        "[W, H] (as --image-size); default the encoder's native size.",
    )

    @model_validator(mode="before")
    @classmethod
    def _image_size_text(cls, data: object) -> object:
        """``image_size: 896x896`` (a workload file's way to write it) -> (896, 896)."""
        return image_size_text(data)

    @model_validator(mode="after")
    def _check_images(self) -> RequestClass:
        if self.image_size is not None and not all(1 <= side <= MAX_IMAGE_SIDE for side in self.image_size):
            w, h = self.image_size
            raise ScenarioError(
                f"class {self.name}: image_size {w}x{h}: each side must be 1 to {MAX_IMAGE_SIDE:,} pixels.",
                hint="Give the images' width and height in pixels, e.g. image_size: 896x896.",
            )
        if self.image_size is not None and not self.images_per_request:
            raise ScenarioError(
                f"class {self.name}: image_size without images_per_request: its requests carry no images.",
                hint="Add images_per_request: N (N >= 1), or drop image_size.",
            )
        if self.images_per_request and self.shared_prefix is not None:
            raise ScenarioError(
                f"class {self.name}: images with a shared_prefix are not modelled (the prefix cache would hold the "
                "images' tokens and skip their encoder, which the simulator does not follow).",
                hint="Drop the class's shared_prefix (or its images), or put the images in a class of their own.",
            )
        return self


class Workload(BaseModel):
    """The traffic offered to one replica.

    Defaults follow ``vllm bench serve --dataset-name random`` (input 1024, output 128 tokens).
    """

    model_config = _SPEC

    arrivals: Arrivals = Field(
        default_factory=PoissonArrivals,
        description="How requests arrive: Poisson at a rate (req/s), a closed loop at a fixed "
        "concurrency (requests), or a trace file.",
    )
    num_requests: int | None = Field(
        1000,
        ge=1,
        le=MAX_REQUESTS,
        description=f"Requests to simulate, a count from 1 to {MAX_REQUESTS:,} (each costs the simulator memory and "
        "time). With a trace: its first num_requests rows, or every row when None (None needs a trace).",
    )
    input_tokens: LengthDistribution = Field(
        default_factory=lambda: FixedLength(tokens=1024),
        description="Prompt length distribution, in tokens (ignored by a trace, which gives lengths).",
    )
    output_tokens: LengthDistribution = Field(
        default_factory=lambda: FixedLength(tokens=128),
        description="Generated length distribution, in tokens (ignored by a trace, which gives lengths).",
    )
    prefix_cache_hit_rate: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="Fraction of each prompt's tokens already in the prefix cache (0 to 1, unitless); "
        "they are not recomputed but still occupy KV blocks.",
    )
    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="Seed of the numpy random generator, an integer from 0 to 2^64 - 1."
    )
    classes: tuple[RequestClass, ...] = Field(
        (),
        max_length=MAX_CLASSES,
        description="Request classes, each a Poisson stream with its own rate, count, lengths, priority and "
        "shared prefix; when given they are the whole workload (arrivals, lengths and the hit rate above are "
        "unused and must be left out).",
    )

    @model_validator(mode="before")
    @classmethod
    def _classes_alone(cls, data: object) -> object:
        """With classes, the single-stream fields must not be given too; num_requests becomes their sum."""
        if not isinstance(data, dict) or not data.get("classes"):
            return data
        both = [k for k in ("arrivals", "input_tokens", "output_tokens", "prefix_cache_hit_rate") if k in data]
        if both:
            raise ScenarioError(
                f"a workload with request classes takes no {', '.join(both)} of its own: each class has its rate "
                "and lengths, and a shared_prefix instead of a hit rate.",
                hint="Move them into the classes, or drop 'classes' for one stream.",
            )
        classes = data["classes"]
        names = [c.get("name") if isinstance(c, dict) else getattr(c, "name", None) for c in classes]
        repeated = sorted({n for n in names if n is not None and names.count(n) > 1})
        if repeated:
            raise ScenarioError(f"request class names repeat: {', '.join(map(str, repeated))}.", hint="Name each once.")
        raw = [c.get("num_requests") if isinstance(c, dict) else getattr(c, "num_requests", None) for c in classes]
        counts = [n for n in raw if isinstance(n, int) and not isinstance(n, bool)]
        if len(counts) == len(raw):  # else a class's own validation names the bad count
            total = sum(counts)
            if total > MAX_REQUESTS:
                raise ScenarioError(
                    f"the classes ask for {total:,} requests in all; one simulation takes at most {MAX_REQUESTS:,}.",
                    hint="Lower the classes' num_requests.",
                )
            data = {**data, "num_requests": total}
        return data

    @model_validator(mode="after")
    def _count_known(self) -> Workload:
        if self.num_requests is None and not isinstance(self.arrivals, TraceArrivals):
            raise ScenarioError(
                f"num_requests=None means 'every row of the trace', but arrivals are {self.arrivals.kind}.",
                hint="Give num_requests a count, or replay a trace.",
            )
        return self

    @property
    def max_in_flight(self) -> int | None:
        """The client's cap on requests in flight (``PoissonArrivals.max_concurrency``); None without one."""
        return self.arrivals.max_concurrency if isinstance(self.arrivals, PoissonArrivals) else None

    def with_max_in_flight(self, cap: int | None) -> Workload:
        """The same Poisson stream under the client cap ``cap`` (None: none); other arrivals as they are."""
        if not isinstance(self.arrivals, PoissonArrivals):
            return self
        return self.model_copy(update={"arrivals": self.arrivals.model_copy(update={"max_concurrency": cap})})

    def at_unit_rate(self, num_requests: int) -> Workload:
        """``num_requests`` Poisson requests at 1 req/s with this workload's lengths and client cap: the shape the
        rate-free computations (the knee, the rate sweep, the deployment search) draw and key on."""
        arrivals = PoissonArrivals(request_rate_per_s=1.0, max_concurrency=self.max_in_flight)
        return self.model_copy(update={"arrivals": arrivals, "num_requests": num_requests})


def rank_share(count: int | None, ranks: int) -> int | None:
    """One of ``ranks`` data-parallel ranks' share of a count of requests in flight (a closed loop's concurrency,
    a client's cap): an even split, at least 1; None stays None."""
    return None if count is None else max(1, round(count / ranks))


@dataclass(frozen=True, slots=True)
class RequestSet:
    """Requests ready to simulate, in arrival order: one array element per request.

    ``arrival_time_s`` is None in a closed loop: the simulator sets arrivals as requests finish.
    """

    arrival_time_s: np.ndarray | None
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    concurrency: int | None
    prefix_cache_hit_rate: float
    #: Open loop only: most requests in flight; an arrival beyond it is sent when one finishes (None: no cap).
    max_in_flight: int | None = None
    #: With request classes: each request's class (an index into ``class_names``), its priority, and the
    #: prompt tokens a shared prefix lets it find cached (before block rounding); None without classes.
    class_id: np.ndarray | None = None
    priority: np.ndarray | None = None
    shared_prefix_tokens: np.ndarray | None = None
    class_names: tuple[str, ...] = ()
    #: With images (set by ``planner.serve.replica.request_images``, which knows the model's encoder): each
    #: request's image count, the prompt tokens of each of its images (``input_tokens`` includes them; the images
    #: sit at the prompt's start) and the vision encoder's seconds per image; None without images.
    images: np.ndarray | None = None
    image_tokens: np.ndarray | None = None
    image_seconds: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.input_tokens)

    def take(self, index: slice) -> RequestSet:
        """The requests at ``index`` (a slice of arrival order), every per-request array cut alike."""
        values = {f.name: getattr(self, f.name) for f in dataclass_fields(self)}
        cut: dict[str, Any] = {name: a[index] for name, a in values.items() if isinstance(a, np.ndarray)}
        return replace(self, **cut)


def generate_requests(workload: Workload) -> RequestSet:
    """Draw the requests of ``workload``; the same seed gives identical arrays.

    Arrival gaps, input lengths and output lengths come from three independent child streams of
    ``np.random.default_rng(seed)``, so changing one distribution leaves the others' draws alone.
    """
    if workload.classes:
        return _classed_requests(workload.classes, workload.seed)
    arrivals = workload.arrivals
    hit_rate = workload.prefix_cache_hit_rate
    if isinstance(arrivals, TraceArrivals):
        arrival, inputs, outputs = load_trace(arrivals.path)
        n = workload.num_requests
        if n is not None:
            if n > len(inputs):
                raise ScenarioError(
                    f"num_requests={n} but the trace {arrivals.path} has {len(inputs)} rows.",
                    hint=f"Set num_requests <= {len(inputs)}, or None to replay every row.",
                )
            arrival, inputs, outputs = arrival[:n], inputs[:n], outputs[:n]
        return RequestSet(arrival, inputs, outputs, None, hit_rate)

    n = workload.num_requests
    assert n is not None  # the validator refuses None without a trace
    arrival_rng, input_rng, output_rng = np.random.default_rng(workload.seed).spawn(3)
    inputs = workload.input_tokens.sample(input_rng, n)
    outputs = workload.output_tokens.sample(output_rng, n)
    if isinstance(arrivals, ConcurrencyArrivals):
        return RequestSet(None, inputs, outputs, arrivals.concurrency, hit_rate)
    gaps = arrival_rng.exponential(1.0 / arrivals.request_rate_per_s, size=n)
    gaps[0] = 0.0  # the first request is sent at t = 0, as vllm bench serve does
    return RequestSet(np.cumsum(gaps), inputs, outputs, None, hit_rate, max_in_flight=arrivals.max_concurrency)


def _classed_requests(classes: tuple[RequestClass, ...], seed: int) -> RequestSet:
    """Each class's Poisson stream (its first request at t = 0, as ``vllm bench serve`` sends one), merged in
    arrival order (ties: class order). Class c draws from child stream c of ``default_rng(seed)``, itself
    split in four (gaps, prompt, output, which shared prompt), so adding a class leaves the others' draws.

    A shared prefix adds its tokens to every prompt of the class; the first request to use each of the
    ``prompts`` system prompts computes it, every later one may find it cached (``shared_prefix_tokens``).
    """
    arrival, inputs, outputs, cid, prio, shared = [], [], [], [], [], []
    for c, (rc, rng) in enumerate(zip(classes, np.random.default_rng(seed).spawn(len(classes)), strict=True)):
        gap_rng, input_rng, output_rng, prompt_rng = rng.spawn(4)
        n = rc.num_requests
        gaps = gap_rng.exponential(1.0 / rc.request_rate_per_s, size=n)
        gaps[0] = 0.0
        own = rc.input_tokens.sample(input_rng, n)
        hit = np.zeros(n, dtype=np.int64)
        if rc.shared_prefix is not None:
            own = own + rc.shared_prefix.tokens
            which = prompt_rng.integers(rc.shared_prefix.prompts, size=n)
            _, first = np.unique(which, return_index=True)
            hit[:] = rc.shared_prefix.tokens
            hit[first] = 0  # the first use of each system prompt computes it
        arrival.append(np.cumsum(gaps))
        inputs.append(own)
        outputs.append(rc.output_tokens.sample(output_rng, n))
        cid.append(np.full(n, c, dtype=np.int64))
        prio.append(np.full(n, rc.priority, dtype=np.int64))
        shared.append(hit)
    times = np.concatenate(arrival)
    order = np.lexsort((np.concatenate(cid), times))  # by time, then class
    inputs_all = np.concatenate(inputs)[order]
    too_long = inputs_all > MAX_TOKENS
    if too_long.any():
        raise ScenarioError(
            f"{int(too_long.sum())} request(s) have a prompt of up to {int(inputs_all.max()):,} tokens with the shared "
            f"prefix, past the {MAX_TOKENS:,} a request may have.",
            hint="Shorten the class's shared_prefix.tokens or its input_tokens.",
        )
    return RequestSet(
        times[order],
        inputs_all,
        np.concatenate(outputs)[order],
        None,
        0.0,
        class_id=np.concatenate(cid)[order],
        priority=np.concatenate(prio)[order],
        shared_prefix_tokens=np.concatenate(shared)[order],
        class_names=tuple(rc.name for rc in classes),
    )


def round_robin_share(workload: Workload, replicas: int) -> Workload:
    """What one of ``replicas`` replicas behind a round-robin router serves of an open-loop workload: 1 / R of
    its Poisson rate (of each class's, for request classes) and of its requests (at least one)."""
    if workload.classes:
        classes = tuple(
            c.model_copy(
                update={
                    "request_rate_per_s": c.request_rate_per_s / replicas,
                    "num_requests": max(1, c.num_requests // replicas),
                }
            )
            for c in workload.classes
        )
        return Workload(classes=classes, seed=workload.seed)
    rate = getattr(workload.arrivals, "request_rate_per_s", None)
    if rate is None or workload.num_requests is None:
        raise ScenarioError(
            "splitting traffic over replicas takes a Poisson rate (or request classes); "
            f"these arrivals are {workload.arrivals.kind}.",
            hint="Give --qps or --workload-file.",
        )
    return workload.model_copy(
        update={
            "arrivals": workload.arrivals.model_copy(update={"request_rate_per_s": rate / replicas}),
            "num_requests": max(1, workload.num_requests // replicas),
        }
    )


#: Largest workload file read: 1 MiB (a few dozen classes are a few KiB).
MAX_WORKLOAD_FILE_BYTES = 1 << 20


def load_workload_file(path: str | Path) -> Workload:
    """A mixed workload from a YAML or JSON file: ``{"classes": [...], "seed": N}``, each class as
    ``RequestClass`` names its fields (``name``, ``request_rate_per_s``, ``num_requests``, ``input_tokens``,
    ``output_tokens`` as length distributions, ``priority``, ``shared_prefix: {tokens, prompts}``, and
    ``images_per_request`` / ``image_size: WxH`` for a class whose requests carry images).

    Example (YAML)::

        classes:
          - {name: chat, request_rate_per_s: 8, num_requests: 2000,
             input_tokens: {kind: fixed, tokens: 200}, output_tokens: {kind: fixed, tokens: 150},
             shared_prefix: {tokens: 800, prompts: 4}}
          - {name: docs, request_rate_per_s: 0.5, num_requests: 100, priority: 1,
             input_tokens: {kind: uniform, low_tokens: 4000, high_tokens: 12000}}
          - {name: photos, request_rate_per_s: 1, num_requests: 200, images_per_request: 2, image_size: 1280x720}

    Raises ScenarioError naming the file and the field for anything it cannot use.
    """
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_WORKLOAD_FILE_BYTES:
            raise ScenarioError(
                f"workload file {file} is {size:,} bytes; at most {MAX_WORKLOAD_FILE_BYTES:,} are read.",
                hint="A workload file lists request classes, a few KiB; for recorded traffic use --trace.",
            )
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        reason = err.strerror or str(err)
        raise ScenarioError(f"cannot read workload file {file}: {reason}.", hint="Check the path.") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"workload file {file} is not UTF-8 text.", hint="Save it as YAML or JSON.") from None
    import yaml  # only here: the simulator's other paths never read YAML

    try:
        if file.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (a safe loader)
    except (ValueError, yaml.YAMLError) as err:  # json.JSONDecodeError is a ValueError
        raise ScenarioError(f"workload file {file} does not parse: {err}.", hint="Fix the syntax.") from None
    if not isinstance(data, dict) or not isinstance(data.get("classes"), list) or not data["classes"]:
        raise ScenarioError(
            f"workload file {file} must be a mapping with a non-empty 'classes' list.",
            hint="See planner.serve.workload.load_workload_file for the format.",
        )
    unknown = sorted(set(data) - {"classes", "seed"})
    if unknown:
        raise ScenarioError(
            f"workload file {file} has unknown top-level key(s) {', '.join(map(repr, unknown))}.",
            hint="Only 'classes' and 'seed' belong at the top; each class has its own rate and lengths.",
        )
    try:
        return Workload.model_validate(data)
    except ValidationError as err:
        where = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {str(e['msg']).removeprefix('Value error, ')}" for e in err.errors()
        )
        raise ScenarioError(f"workload file {file}: {where}.", hint="Fix those fields.") from None


# ---------------------------------------------------------------------------------------------
# Traces.
# ---------------------------------------------------------------------------------------------

TRACE_COLUMNS = ("arrival_time_s", "input_tokens", "output_tokens")


def load_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read a request trace: (arrival_time_s, input_tokens, output_tokens), sorted by arrival.

    CSV (``.csv``): a header row naming at least ``arrival_time_s,input_tokens,output_tokens``
    (other columns are ignored). JSONL (``.jsonl``/``.ndjson``): one object per line with those keys.
    Blank lines are skipped. Arrival times are seconds >= 0; lengths are whole tokens >= 1
    ("512" and "512.0" are accepted, "512.5" is not). Raises ConfigError naming the line.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"trace file {path} does not exist.", hint="Check the path.")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        rows = _read_csv_rows(path)
    elif suffix in (".jsonl", ".ndjson"):
        rows = _read_jsonl_rows(path)
    else:
        raise ConfigError(
            f"trace file {path} has suffix {suffix!r}; expected .csv or .jsonl.",
            hint="Rename the file after its format.",
        )
    if not rows:
        raise ConfigError(f"trace file {path} has no requests.", hint="Add at least one row.")
    arrival = np.empty(len(rows))
    inputs = np.empty(len(rows), dtype=np.int64)
    outputs = np.empty(len(rows), dtype=np.int64)
    for i, (line_no, row) in enumerate(rows):
        arrival[i] = _parse_time(path, line_no, row["arrival_time_s"])
        inputs[i] = _parse_tokens(path, line_no, "input_tokens", row["input_tokens"])
        outputs[i] = _parse_tokens(path, line_no, "output_tokens", row["output_tokens"])
    order = np.argsort(arrival, kind="stable")
    return arrival[order], inputs[order], outputs[order]


def _read_csv_rows(path: Path) -> list[tuple[int, dict]]:
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            return []
        header = [name.strip() for name in header]
        missing = [c for c in TRACE_COLUMNS if c not in header]
        if missing:
            raise ConfigError(
                f"{path} line 1: the header {header} lacks {', '.join(missing)}.",
                hint=f"The first row must name the columns {','.join(TRACE_COLUMNS)}.",
            )
        index = {c: header.index(c) for c in TRACE_COLUMNS}
        rows = []
        for fields in reader:
            line_no = reader.line_num
            if not fields or all(not f.strip() for f in fields):
                continue
            if len(fields) < len(header):
                raise ConfigError(
                    f"{path} line {line_no}: {len(fields)} fields, the header has {len(header)}.",
                    hint="Give every row a value for each column.",
                )
            rows.append((line_no, {c: fields[j].strip() for c, j in index.items()}))
            _check_row_count(path, len(rows))
        return rows


def _read_jsonl_rows(path: Path) -> list[tuple[int, dict]]:
    rows = []
    with path.open() as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ConfigError(
                    f"{path} line {line_no}: not valid JSON ({err.msg}).",
                    hint="Write one JSON object per line.",
                ) from None
            if not isinstance(row, dict):
                raise ConfigError(
                    f"{path} line {line_no}: expected a JSON object, found {type(row).__name__}.",
                    hint=f"Write objects with the keys {', '.join(TRACE_COLUMNS)}.",
                )
            missing = [c for c in TRACE_COLUMNS if c not in row]
            if missing:
                raise ConfigError(
                    f"{path} line {line_no}: missing {', '.join(missing)}.",
                    hint=f"Every line needs {', '.join(TRACE_COLUMNS)}.",
                )
            rows.append((line_no, row))
            _check_row_count(path, len(rows))
    return rows


def _check_row_count(path: Path, rows: int) -> None:
    """A trace holds at most MAX_REQUESTS requests: refused while reading, before the arrays are built."""
    if rows > MAX_REQUESTS:
        raise ConfigError(
            f"trace file {path} has more than {MAX_REQUESTS:,} requests, the most one simulation takes.",
            hint="Split the trace, or replay its first rows (head -n 1000001 trace.csv > part.csv).",
        )


def _as_float(raw: object) -> float:
    """A trace cell (CSV text or a JSON value) as a float; NaN when it is not a number or numeric text."""
    if not isinstance(raw, int | float | str):
        return math.nan
    try:
        return float(raw)
    except (ValueError, OverflowError):  # OverflowError: a JSON integer beyond float's range
        return math.nan


def _parse_time(path: Path, line_no: int, raw: object) -> float:
    value = _as_float(raw)
    if isinstance(raw, bool) or not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"{path} line {line_no}: arrival_time_s={raw!r} is not a number of seconds >= 0.",
            hint="Give arrival times in seconds from the start of the trace.",
        )
    return value


def _parse_tokens(path: Path, line_no: int, column: str, raw: object) -> int:
    value = _as_float(raw)
    if isinstance(raw, bool) or not math.isfinite(value) or not 1 <= value <= MAX_TOKENS or value != int(value):
        raise ConfigError(
            f"{path} line {line_no}: {column}={raw!r} is not a whole number of tokens from 1 to {MAX_TOKENS:,}.",
            hint="Give token counts as positive integers.",
        )
    return int(value)
