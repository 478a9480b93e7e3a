"""Resident bytes of routed-expert weights as the engine holds them after loading, not as the checkpoint stores them.

An engine's kernel backend for a quantized expert format depends on the card, and the backends pad the
expert shapes or keep a second copy of the scales (``planner.engine.MoeWeightLayout``, cited per rule in
the engine profiles). For one MoE layer on one tensor-parallel rank, with E experts, hidden size H and
per-rank expert width I_p = I / tp, the gate/up and down projections hold 3 x H x I_p weights per expert.
The engine holds instead

    3 x round_up(H, a_H) x round_up(I_p, a_I) weights, each at (bits + (copies - 1) x scale_bits),

so each checkpoint weight costs ``pad x (bits + (copies - 1) x scale_bits) / 8`` bytes, with
pad = round_up(H, a_H) x round_up(I_p, a_I) / (H x I_p); expert biases are held at the rule's bytes.

gpt-oss-120b on one H100 (triton_kernels, scales twice, fp32 biases): 60.95 GiB in the checkpoint,
64.36 GiB resident; vLLM 0.14.1 logs 64.38 GiB (vllm#33155).
"""

from __future__ import annotations

from planner.engine import MoeWeightLayout
from planner.units import round_up


def expert_pad_ratio(layout: MoeWeightLayout, hidden_size: int, intermediate_size: int, tp: int) -> float:
    """Held / checkpoint expert weights on one rank: the padded H x I_p over H x I_p."""
    per_rank = max(intermediate_size // tp, 1)
    held = round_up(hidden_size, layout.pad_hidden_to) * round_up(per_rank, layout.pad_intermediate_to)
    return held / (hidden_size * per_rank)


def resident_expert_bits(
    layout: MoeWeightLayout, bits_per_weight: float, hidden_size: int, intermediate_size: int, tp: int
) -> float:
    """Bits the engine holds per checkpoint expert weight (padding and extra scale copies included)."""
    extra_scales = (layout.scale_copies - 1) * layout.scale_bits_per_weight
    return expert_pad_ratio(layout, hidden_size, intermediate_size, tp) * (bits_per_weight + extra_scales)


def resident_bias_bytes(layout: MoeWeightLayout, act_bytes_per_element: float) -> float:
    """Bytes per expert-bias element after loading."""
    return layout.bias_bytes_per_element or act_bytes_per_element
