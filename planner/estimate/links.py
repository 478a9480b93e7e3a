"""Links: where the ranks of one collective or one transfer sit and how fast they talk, from the card's profile.

Numbers only (no numpy), so that the placement of ranks (``planner.estimate.placement``, which the memory plan
and the ``plan`` command use) needs none of the step model's array machinery; ``planner.estimate.step`` prices
collectives over these links and re-exports ``Link``.
"""

from __future__ import annotations

from typing import Any

#: One-way PCIe bandwidth when a profile gives no link (PCIe 4 x16 ~ 32 GB/s raw, ~25 usable).
PCIE_FALLBACK_BYTES_PER_S = 25e9


class Link:
    """Where the ranks of one collective sit and how fast they talk (from the hardware profile).

    ``kind`` is 'nvlink' (an NVLink/Infinity-Fabric domain), 'pcie' or 'network' (the group spans
    nodes). ``one_way_bytes_per_s`` is the per-GPU bandwidth in one direction on that path.
    """

    __slots__ = ("kind", "one_way_bytes_per_s")

    def __init__(self, kind: str, one_way_bytes_per_s: float):
        self.kind = kind
        self.one_way_bytes_per_s = one_way_bytes_per_s

    @classmethod
    def for_group(cls, hw: Any, ranks: int) -> Link:
        """The path a group of ``ranks`` GPUs of card ``hw`` uses: inside the node's fast domain when it
        fits (``gpus_per_node``), else the scale-out network."""
        per_node = hw.gpus_per_node or 8
        if ranks > per_node:
            bw = hw.inter_node_bandwidth_bytes_per_s or PCIE_FALLBACK_BYTES_PER_S / 2
            return cls("network", bw)
        kind = hw.interconnect_kind or "pcie4"
        one_way = hw.unidirectional_interconnect_bytes_per_s or PCIE_FALLBACK_BYTES_PER_S
        return cls("pcie" if kind.startswith("pcie") or kind == "none" else "nvlink", one_way)

    def __repr__(self) -> str:
        return f"Link({self.kind!r}, {self.one_way_bytes_per_s:.3g} B/s)"
