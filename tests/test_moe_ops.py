"""The fused-MoE layer's small kernels (routing, sort, activation, reduce, W8A8 quantization) as ops.

Hand counts for one Qwen3-30B-A3B-shaped MoE block (h 2048, 128 experts, top-8, expert width 768),
as vLLM's Triton fused-MoE path launches them (planner/model/layers.py ``MoE._routing_ops``).
"""

from __future__ import annotations

import pytest

from planner.model.layers import MoE
from planner.model.ops import StepShape

H, E, K, I_E = 2048, 128, 8, 768


def _block() -> MoE:
    return MoE(hidden_size=H, num_experts=E, experts_per_token=K, expert_intermediate_size=I_E)


def _ops(tokens: int, tp: int = 1, experts_dtype: str = "bf16"):
    shape = StepShape(
        num_seqs=tokens, query_len=1, context_len=512, causal=False, tp=tp, compute_dtypes={"experts": experts_dtype}
    )
    return {op.name.split(" (")[0]: op for op in _block().ops(shape)}


def test_bf16_experts_launch_router_topk_align_two_gemms_act_reduce():
    ops = _ops(16)
    names = list(ops)
    assert names[:6] == ["moe.router", "moe.topk", "moe.align", "moe.act", "moe.reduce", "moe.experts"]
    assert sum(op.kernels for op in ops.values()) == 1 + 4 + 2  # no quantization kernels at bf16


@pytest.mark.parametrize("dtype", ["fp8", "int8", "fp4"])
def test_w8a8_experts_add_two_quantization_kernels(dtype):
    ops = _ops(16, experts_dtype=dtype)
    assert {"moe.quant_input", "moe.quant_intermediate"} <= set(ops)
    assert sum(op.kernels for op in ops.values()) == 1 + 6 + 2


def test_routing_kernel_bytes_by_hand():
    T, tp = 16, 2
    ops = _ops(T, tp=tp, experts_dtype="fp8")
    mid = T * K * I_E / tp  # elements of the activation's output on one rank
    assert ops["moe.act"].activation_bytes == pytest.approx(mid * 3 * 2.0)  # reads 2 x mid, writes mid, bf16
    assert ops["moe.reduce"].activation_bytes == pytest.approx(T * H * (K + 1) * 2.0)  # k outputs in, one out
    assert ops["moe.topk"].activation_bytes == pytest.approx(T * E * (1 + 2 * K / E) * 2.0)
    assert ops["moe.quant_input"].activation_bytes == pytest.approx(T * H * 1.5 * 2.0)
    assert ops["moe.quant_intermediate"].activation_bytes == pytest.approx(mid * 1.5 * 2.0)
    # the small kernels hold no weights and do no GEMM
    for name in ("moe.topk", "moe.align", "moe.act", "moe.reduce", "moe.quant_input", "moe.quant_intermediate"):
        assert ops[name].weight_bytes == 0 and ops[name].kind == "elementwise" and ops[name].kernels == 1


def test_routing_kernels_grow_linearly_with_tokens():
    small, large = _ops(8), _ops(64)
    for name in ("moe.topk", "moe.align", "moe.act", "moe.reduce"):
        assert large[name].activation_bytes == pytest.approx(8 * small[name].activation_bytes)
