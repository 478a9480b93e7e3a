"""The benchmarks: for each group, its checks' plans and the torch code that times them.

Each group is a pair: ``plan_<group>(model, sizes, dev, hw, dtype)`` lists the checks with the
planner's ops (torch-free, ``planner.bench.plan``), and ``run_<group>(ctx, plans, runner)`` runs
the same shapes in torch with random data, handing each check to ``runner.check`` (which turns any
failure into a row). Shared inputs are rotated between calls (``Ctx.slots``) and every allocation
step asks the memory guard first.

* ``memory_bandwidth``: one large device-to-device copy (read + write).
* ``launch_overhead``: many tiny kernels, eager and replayed from a captured CUDA graph.
* ``gemm``: every distinct linear layer of the model (q, k, o, MLP or one expert, lm_head) at
  prefill-sized and decode-sized M, in the benchmark dtype.
* ``gemm_fp8``: the MLP GEMMs through ``torch._scaled_mm`` in float8_e4m3fn, where the card has FP8.
* ``attention_decode``: SDPA of one query token over the KV cache, several batches and contexts.
* ``layer_forward``: one decoder layer (prefill and decode step) and the head, in plain torch at
  the real dimensions, then the whole model derived as layers x count + head.
* ``kv_cache``: allocate the KV cache ``plan_memory`` plans (as much of it as the guard and the
  size cap allow) and time one write over it.

``probe_profile`` measures a detected card's peaks when no hardware profile matches it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.bench.plan import (
    CheckPlan,
    GemmShape,
    attention_decode_ops,
    first_attention,
    forward_plans,
    gemm_op,
    layer_gemms,
)
from planner.bench.report import DeviceInfo, OpCount, SuiteSizes
from planner.bench.safety import Deadline, MemoryGuard, fill, release
from planner.bench.timing import Timing, measure, random_tensor, rotation_slots
from planner.errors import PlannerError
from planner.estimate.memory import plan_memory
from planner.estimate.roofline import layer_groups
from planner.hardware import HardwareProfile, profile_from_detected
from planner.model.ops import Op
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.units import fmt_bytes

if TYPE_CHECKING:
    from planner.bench.suite import Runner


# -------------------------------------------------------------------------------- context


@dataclass
class Outcome:
    """What running one check gave: a measurement or the reason there is none."""

    status: str
    seconds: float | None = None
    how: str | None = None
    repeats: int | None = None
    reason: str | None = None
    details: dict = field(default_factory=dict)


@dataclass
class Ctx:
    """Everything a benchmark needs: torch, the device, the model, the limits."""

    torch: Any  # the torch module, imported by the suite only when it runs (the core never imports it)
    dev: DeviceInfo
    device: Any  # a torch.device
    dtype_name: str
    dtype: Any  # a torch.dtype
    model: ModelSpec
    hw: HardwareProfile
    sizes: SuiteSizes
    guard: MemoryGuard
    deadline: Deadline
    cache: dict = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.dev.kind

    @property
    def elt(self) -> int:
        return self.dtype.itemsize

    def slots(self, bytes_per_slot: float) -> int:
        return rotation_slots(
            bytes_per_slot,
            self.dev.l2_cache_bytes,
            self.sizes.rotation_cache_multiple,
            self.sizes.max_rotation_slots,
            self.guard.allowance_bytes(),
        )

    def time(self, step: Callable[[int], object]) -> Timing:
        s = self.sizes
        return measure(
            self.torch,
            self.kind,
            step,
            warmup=s.warmup,
            repeats=s.repeats,
            deadline=self.deadline,
            max_seconds=s.max_seconds_per_check,
        )

    def rand(self, shape, scale: float = 1.0, dtype=None):
        return random_tensor(self.torch, shape, dtype or self.dtype, self.device, scale)

    def fill(self, make: Callable[[], object], count: int, what: str) -> list:
        """Up to ``count`` input sets from ``make()``, as many as the deadline holds (``safety.fill``)."""
        return fill(make, count, self.deadline, what)

    def check_time(self, during: str) -> None:
        """Raise BenchTimeout when the group's deadline has passed ``during`` a setup phase."""
        if self.deadline.expired():
            raise self.deadline.timeout(during)


def _measured(t: Timing, **details) -> Outcome:
    return Outcome(status="ok", seconds=t.median_seconds, how=t.how, repeats=t.repeats, details=details)


# ---------------------------------------------------------------------------- benchmarks
# Each group: plan_<group>(model, sizes, dev, hw, dtype) -> plans; run_<group>(ctx, plans, runner).


def plan_memory_bandwidth(model, sizes, dev, hw, dtype) -> list[CheckPlan]:
    n = sizes.copy_bytes
    op = Op(name="device copy (read + write)", kind="elementwise", flops=0.0, activation_bytes=2.0 * n)
    return [
        CheckPlan(
            "memory_bandwidth",
            f"copy {n / 2**20:,.0f} MiB device-to-device",
            {"bytes": n, "traffic_bytes": 2 * n},
            [OpCount(op=op, count=1)],
        )
    ]


def run_memory_bandwidth(ctx: Ctx, plans: list[CheckPlan], runner: Runner) -> None:
    plan = plans[0]

    def fn() -> Outcome:
        n = plan.count("bytes") // ctx.elt
        ctx.guard.check(2 * n * ctx.elt, "copy buffers")
        a, b = ctx.rand((n,)), ctx.rand((n,))
        ctx.check_time("while filling the copy buffers")
        # ruff reads the lambda after the `del` below; it runs (inside ctx.time) before it
        t = ctx.time(lambda i: b.copy_(a) if i % 2 == 0 else a.copy_(b))  # noqa: F821
        del a, b
        return _measured(t)

    runner.check(plan, fn)


_LAUNCH_ELEMENTS = 1  # one element: the kernel is all launch, no bytes to speak of


def plan_launch_overhead(model, sizes, dev, hw, dtype) -> list[CheckPlan]:
    n = sizes.launches
    op = Op(
        name=f"{n} tiny kernels (x.add_ on {_LAUNCH_ELEMENTS} fp32)",
        kind="elementwise",
        flops=float(n * _LAUNCH_ELEMENTS),
        activation_bytes=float(n * 2 * _LAUNCH_ELEMENTS * 4),
        kernels=n,
    )
    shape = {"kernels": n, "elements": _LAUNCH_ELEMENTS}
    eager = CheckPlan(
        "launch_overhead", f"launch {n} kernels eager", {**shape, "mode": "eager"}, [OpCount(op=op, count=1)]
    )
    graph = CheckPlan(
        "launch_overhead",
        f"launch {n} kernels CUDA graph",
        {**shape, "mode": "cuda-graph"},
        [OpCount(op=op, count=1)],
        graphs=True,
    )
    if not dev.cuda_graphs_supported:
        graph.unavailable = "CUDA graphs need an NVIDIA GPU (this run is on CPU): eager launch cost only"
    return [eager, graph]


def run_launch_overhead(ctx: Ctx, plans: list[CheckPlan], runner: Runner) -> None:
    torch = ctx.torch
    eager, graph = plans
    n = eager.count("kernels")
    x = ctx.rand((_LAUNCH_ELEMENTS,), dtype=torch.float32)

    def many(_i=None):
        for _ in range(n):
            x.add_(1.0)

    def eager_fn() -> Outcome:
        t = ctx.time(many)
        return _measured(t, per_launch_seconds=t.median_seconds / n)

    runner.check(eager, eager_fn)

    def captured() -> Outcome:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                many()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            many()
        t = ctx.time(lambda i: g.replay())
        return _measured(t, per_launch_seconds=t.median_seconds / n)

    runner.check(graph, captured)


def _model_gemms(model: ModelSpec) -> list[GemmShape]:
    seen, out = set(), []
    for _, idx in layer_groups(model):
        for g in layer_gemms(model.layers[idx[0]]):
            if (g.n, g.k) not in seen:
                seen.add((g.n, g.k))
                out.append(g)
    return out


def plan_gemm(model, sizes, dev, hw, dtype) -> list[CheckPlan]:
    plans = []
    for g in _model_gemms(model):
        for m in (*sizes.gemm_prefill_tokens, *sizes.gemm_decode_tokens):
            plans.append(_gemm_plan("gemm", g, m, dtype))
    head = GemmShape("lm_head", "lm_head", model.padded_vocab_size, model.embedding_dim)
    for m in sizes.gemm_decode_tokens:
        plans.append(_gemm_plan("gemm", head, m, dtype))
    return plans


def _gemm_plan(bench: str, g: GemmShape, m: int, dtype: str) -> CheckPlan:
    return CheckPlan(
        bench,
        f"{'gemm' if bench == 'gemm' else 'fp8 gemm'} {g.name} M={m} N={g.n} K={g.k}",
        {"m": m, "n": g.n, "k": g.k, "dtype": dtype},
        [OpCount(op=gemm_op(g, m, dtype), count=1)],
    )


def _weights(ctx: Ctx, slot: str, key, make: Callable[[], object], bytes_per_slot: float, what: str) -> list:
    """Rotated copies of some weights, kept under ``slot`` while consecutive checks share ``key``."""
    cached = ctx.cache.get(slot)
    if cached is not None and cached[0] == key:
        return cached[1]
    ctx.cache.pop(slot, None)  # drop the previous weights before the guard looks at free memory
    slots = ctx.slots(bytes_per_slot)
    ctx.guard.check(slots * bytes_per_slot, what)
    ws = ctx.fill(make, slots, what)
    ctx.cache[slot] = (key, ws)
    return ws


def run_gemm(ctx: Ctx, plans: list[CheckPlan], runner: Runner) -> None:
    torch = ctx.torch
    for plan in plans:
        m, n, k = (plan.count(x) for x in ("m", "n", "k"))

        def fn(m=m, n=n, k=k) -> Outcome:
            ws = _weights(
                ctx,
                "gemm",
                (n, k),
                lambda: ctx.rand((n, k), scale=1.0 / math.sqrt(k)),
                n * k * ctx.elt,
                f"GEMM weights {n}x{k}",
            )
            per = (m * k + m * n) * ctx.elt
            ctx.guard.check(len(ws) * per, f"GEMM activations M={m}")
            io = ctx.fill(lambda: (ctx.rand((m, k)), ctx.rand((m, n))), len(ws), f"GEMM activations M={m}")
            s = len(io)
            t = ctx.time(lambda i: torch.mm(io[i % s][0], ws[i % s].t(), out=io[i % s][1]))
            return _measured(t, rotation_slots=s)

        runner.check(plan, fn)


def plan_gemm_fp8(model, sizes, dev, hw, dtype) -> list[CheckPlan]:
    gemms = [g for g in _model_gemms(model) if g.component in ("mlp", "experts")][:2]
    ms = sorted({*sizes.gemm_prefill_tokens, 16})
    plans = [_gemm_plan("gemm_fp8", g, m, "fp8") for g in gemms for m in ms]
    reason = None
    if dev.kind != "cuda":
        reason = "fp8 GEMMs need an NVIDIA GPU with FP8 tensor cores (compute capability >= 8.9); this run is on CPU"
    elif not dev.fp8_supported:
        reason = (
            f"this card (compute capability {dev.compute_capability}) or torch build has no FP8 GEMM (torch._scaled_mm)"
        )
    elif not hw.has_native("fp8"):
        reason = f"profile {hw.id} lists no FP8 peak, so the planner runs FP8 weights at the 16-bit rate here"
    for p in plans:
        p.unavailable = reason
    return plans


def run_gemm_fp8(ctx: Ctx, plans: list[CheckPlan], runner: Runner) -> None:
    torch = ctx.torch
    f8 = torch.float8_e4m3fn
    one = torch.ones((), device=ctx.device, dtype=torch.float32)
    for plan in plans:
        m, n, k = (plan.count(x) for x in ("m", "n", "k"))

        def fn(m=m, n=n, k=k) -> Outcome:
            ws = _weights(
                ctx, "gemm", ("fp8", n, k), lambda: ctx.rand((n, k), dtype=f8), n * k, f"fp8 GEMM weights {n}x{k}"
            )
            ctx.guard.check(len(ws) * (m * k + 2 * m * n), f"fp8 GEMM activations M={m}")
            xs = ctx.fill(lambda: ctx.rand((m, k), dtype=f8), len(ws), f"fp8 GEMM activations M={m}")
            s = len(xs)

            def step(i):
                out = torch._scaled_mm(xs[i % s], ws[i % s].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                return out[0] if isinstance(out, tuple) else out

            return _measured(ctx.time(step), rotation_slots=s)

        runner.check(plan, fn)


def plan_attention_decode(model, sizes, dev, hw, dtype) -> list[CheckPlan]:
    attn = first_attention(model)
    if attn is None:
        return [
            CheckPlan(
                "attention_decode",
                "attention decode",
                {},
                [],
                unavailable=(
                    "the model has no MHA/GQA attention layer (MLA and Mamba mixers are not benchmarked with SDPA)"
                ),
            )
        ]
    plans = []
    for b in sizes.attention_batches:
        for c in sizes.attention_contexts:
            if c > model.max_position_embeddings:
                continue
            span = c if attn.window_tokens is None else min(c, attn.window_tokens)
            plans.append(
                CheckPlan(
                    "attention_decode",
                    f"attention decode B={b} context={c}",
                    {
                        "batch": b,
                        "context": c,
                        "kv_span": span,
                        "heads": attn.num_heads,
                        "kv_heads": attn.num_kv_heads,
                        "head_dim": attn.head_dim,
                        "dtype": dtype,
                    },
                    [OpCount(op=op, count=1) for op in attention_decode_ops(attn, b, c, dtype)],
                )
            )
    return plans


def run_attention_decode(ctx: Ctx, plans: list[CheckPlan], runner: Runner) -> None:
    F = ctx.torch.nn.functional
    for plan in plans:
        if plan.unavailable:
            runner.unavailable(plan)
            continue
        b, span, H, K, d = (plan.count(x) for x in ("batch", "kv_span", "heads", "kv_heads", "head_dim"))

        def fn(b=b, span=span, H=H, K=K, d=d) -> Outcome:
            per = (2 * b * K * span * d + 2 * b * H * d) * ctx.elt
            s = ctx.slots(per)
            ctx.guard.check(s * per, f"KV for attention B={b} span={span}")
            qkv = ctx.fill(
                lambda: (ctx.rand((b, H, 1, d)), ctx.rand((b, K, span, d)), ctx.rand((b, K, span, d))),
                s,
                f"KV for attention B={b} span={span}",
            )
            s = len(qkv)
            gqa = H != K
            t = ctx.time(lambda i: F.scaled_dot_product_attention(*qkv[i % s], enable_gqa=gqa))
            return _measured(t, rotation_slots=s)

        runner.check(plan, fn)


def plan_layer_forward(model, sizes, dev, hw, dtype) -> list[CheckPlan]:
    plans: list[CheckPlan] = []
    steps = [("prefill", 1, p) for p in sizes.layer_prefill_tokens] + [("decode", b, c) for b, c in sizes.layer_decode]
    for stage, b, n in steps:
        if n > model.max_position_embeddings:
            continue
        layers, head, whole = forward_plans(model, stage, b, n, dtype)
        plans += [*layers, head, whole]
    return plans


def run_layer_forward(ctx: Ctx, plans: list[CheckPlan], runner: Runner) -> None:
    from planner.bench.layer import TorchDecoderLayer, TorchHead

    torch, model = ctx.torch, ctx.model
    rotary = model.position_embedding_rows == 0
    for plan in plans:
        if plan.unavailable:
            runner.unavailable(plan)
            continue
        stage, b, n = str(plan.shape["stage"]), plan.count("batch"), plan.count("seq_len")
        q_len = n if stage == "prefill" else 1
        if "layer" in plan.shape:
            idx = plan.count("layer")

            def layer(idx=idx, stage=stage, b=b, n=n, q_len=q_len) -> Outcome:
                spec = model.layers[idx]
                wbytes = spec.params * ctx.elt
                layers = _weights(
                    ctx,
                    "layer",
                    idx,
                    lambda: TorchDecoderLayer(torch, spec, ctx.dtype, ctx.device, rotary),
                    wbytes,
                    f"layer {idx} weights",
                )
                s = len(layers)
                act = b * q_len * model.hidden_size * ctx.elt
                cache_bytes = layers[0].cache_bytes(b, n) if stage == "decode" else 0
                ctx.guard.check(s * (cache_bytes + act * 8), f"layer {idx} {stage} caches and activations")
                inputs = ctx.fill(
                    lambda: (
                        ctx.rand((b * q_len, model.hidden_size)),
                        layers[0].new_cache(b, n) if stage == "decode" else None,
                    ),
                    s,
                    f"layer {idx} {stage} inputs",
                )
                s = len(inputs)
                pos = torch.arange(n - q_len, n, device=ctx.device)
                rope = layers[0].rope_tables(pos) if rotary else None
                t = ctx.time(lambda i: layers[i % s].forward(inputs[i % s][0], b, q_len, inputs[i % s][1], rope))
                return _measured(t, rotation_slots=s)

            runner.check(plan, layer)
        else:

            def head(stage=stage, b=b, n=n, q_len=q_len) -> Outcome:
                vocab = model.padded_vocab_size
                tied = model.tie_word_embeddings
                h = model.embedding_dim
                heads = _weights(
                    ctx,
                    "head",
                    "head",
                    lambda: TorchHead(torch, vocab, h, tied, ctx.dtype, ctx.device),
                    TorchHead.param_bytes(vocab, h, tied, ctx.elt),
                    "embedding and lm_head",
                )
                ctx.guard.check(b * (q_len * h + 2 * vocab) * 4 * len(heads), "head activations and logits")
                ids = ctx.fill(
                    lambda: torch.randint(0, model.vocab_size, (b * q_len,), device=ctx.device),
                    len(heads),
                    "head token ids",
                )
                s = len(ids)
                return _measured(ctx.time(lambda i: heads[i % s].forward(ids[i % s], b, q_len)), rotation_slots=s)

            runner.check(plan, head)


def plan_kv_cache(model, sizes, dev, hw, dtype) -> list[CheckPlan]:
    plan = CheckPlan("kv_cache", "KV cache allocation (planned size)", {}, [])
    try:
        mp = plan_memory(model, hw, Scenario(gpu=hw.id), suggest=False)
    except PlannerError as exc:
        plan.unavailable = f"no memory plan for this model on {hw.id}: {exc}"
        return [plan]
    planned = mp.num_gpu_blocks * mp.bytes_per_block
    if planned <= 0:
        plan.unavailable = f"the memory plan leaves no KV cache on {hw.id}: {mp.reason}"
        return [plan]
    target = planned if sizes.kv_alloc_cap_bytes is None else min(planned, sizes.kv_alloc_cap_bytes)
    plan.shape = {
        "planned_kv_bytes": planned,
        "planned_blocks": mp.num_gpu_blocks,
        "bytes_per_block": mp.bytes_per_block,
        "kv_cache_tokens": mp.kv_cache_tokens,
        "target_bytes": target,
        "cap_bytes": sizes.kv_alloc_cap_bytes,
        "plan_fits": mp.fits,
    }
    plan.ops = [OpCount(op=_kv_fill_op(target), count=1)]
    return [plan]


def _kv_fill_op(nbytes: float) -> Op:
    return Op(
        name="kv_cache.fill (one write over the allocation)", kind="elementwise", flops=0.0, kv_bytes=float(nbytes)
    )


_KV_CHUNK_BYTES = 2**30


def run_kv_cache(ctx: Ctx, plans: list[CheckPlan], runner: Runner) -> None:
    torch = ctx.torch
    plan = plans[0]
    if plan.unavailable:
        return runner.unavailable(plan)

    def fn() -> Outcome:
        planned, target = plan.count("planned_kv_bytes"), plan.count("target_bytes")
        free_before = ctx.guard.free_bytes()
        allowance = ctx.guard.allowance_bytes() or 0
        nbytes = min(target, allowance)
        blocks = nbytes // plan.count("bytes_per_block")
        nbytes = blocks * plan.count("bytes_per_block")
        if blocks < 1:
            ctx.guard.check(plan.count("bytes_per_block"), "one KV block")
        ctx.guard.check(nbytes, "KV cache allocation")
        t0 = time.perf_counter()
        chunks, left = [], nbytes
        while left > 0:
            ctx.check_time(f"while allocating the KV cache ({fmt_bytes(nbytes - left)} of {fmt_bytes(nbytes)} done)")
            size = min(left, _KV_CHUNK_BYTES)
            chunks.append(torch.empty(size, dtype=torch.uint8, device=ctx.device))
            left -= size
        alloc_s = time.perf_counter() - t0
        plan.ops = [OpCount(op=_kv_fill_op(nbytes), count=1)]
        plan.shape = {**plan.shape, "allocated_bytes": nbytes}
        # ruff reads the lambda after the `del` below; it runs (inside ctx.time) before it
        t = ctx.time(lambda i: [c.fill_(1 + i % 200) for c in chunks])  # noqa: F821
        limits = []
        if target < planned:
            limits.append(f"the suite's size cap of {fmt_bytes(target)}")
        if nbytes < target:
            limits.append(f"the memory guard ({ctx.guard.fraction:.0%} of {fmt_bytes(free_before)} free)")
        fits = (free_before or 0) >= planned
        out = _measured(
            t,
            planned_kv_bytes=planned,
            allocated_bytes=nbytes,
            allocated_blocks=blocks,
            allocated_fraction_of_plan=round(nbytes / planned, 4),
            allocation_seconds=round(alloc_s, 6),
            free_bytes_before=free_before,
            planned_kv_fits_free_memory=fits,
            device_total_bytes=ctx.dev.memory_total_bytes,
            profile_memory_bytes=ctx.hw.memory_bytes,
        )
        if limits:
            out.reason = (
                f"allocated {fmt_bytes(nbytes)} of the planned {fmt_bytes(planned)} (limited by "
                f"{' and '.join(limits)}); "
                f"the full plan {'fits' if fits else 'does NOT fit'} in the {fmt_bytes(free_before)} free before the "
                f"check"
            )
        del chunks
        return out

    runner.check(plan, fn)


#: Benchmark groups in the order they run: name -> (plan, run).
GROUPS: dict[str, tuple[Callable, Callable]] = {
    "memory_bandwidth": (plan_memory_bandwidth, run_memory_bandwidth),
    "launch_overhead": (plan_launch_overhead, run_launch_overhead),
    "gemm": (plan_gemm, run_gemm),
    "gemm_fp8": (plan_gemm_fp8, run_gemm_fp8),
    "attention_decode": (plan_attention_decode, run_attention_decode),
    "layer_forward": (plan_layer_forward, run_layer_forward),
    "kv_cache": (plan_kv_cache, run_kv_cache),
}
BENCHMARKS = tuple(GROUPS)


# --------------------------------------------------------------------------------- probe


def probe_profile(ctx: Ctx, deadline: Deadline) -> HardwareProfile:
    """A detected profile for a card no YAML describes: bandwidth from a copy, peak from a GEMM.

    The peaks are what this card reached, so predictions against them are near 'bound' by
    construction; the report labels the profile 'detected'.
    """
    torch, dev = ctx.torch, ctx.dev
    ctx.deadline = deadline
    n = ctx.sizes.copy_bytes // ctx.elt
    ctx.guard.check(2 * n * ctx.elt, "probe copy")
    a, b = ctx.rand((n,)), ctx.rand((n,))
    # ruff reads the lambda after the `del` below; it runs (inside ctx.time) before it
    bw = 2 * n * ctx.elt / ctx.time(lambda i: b.copy_(a)).median_seconds  # noqa: F821
    del a, b
    s = 8192 if dev.kind == "cuda" else 1024
    ctx.guard.check(3 * s * s * ctx.elt, "probe GEMM")
    x, w, y = ctx.rand((s, s)), ctx.rand((s, s)), ctx.rand((s, s))
    # ruff reads the lambda after the `del` below; it runs (inside ctx.time) before it
    flops = 2 * s**3 / ctx.time(lambda i: torch.mm(x, w.t(), out=y)).median_seconds  # noqa: F821
    del x, w, y
    release(dev.kind)
    return profile_from_detected(
        dev.name,
        dev.memory_total_bytes or 1,
        hbm_bandwidth_bytes_per_s=bw,
        peak_flops_per_s={ctx.dtype_name: flops},
        kind="gpu" if dev.kind == "cuda" else "cpu",
    )
