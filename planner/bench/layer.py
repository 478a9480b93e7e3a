"""One decoder layer in plain torch at the model's real dimensions, with random weights.

No checkpoint, no transformers: the weights are uniform random tensors shaped as the
``DecoderLayer`` spec says, and the forward is the textbook one an engine runs in eager mode:

    x -> RMSNorm -> q/k/v projections (+ biases, q/k norms) -> rotary -> SDPA (causal prefill, or
    one query over the KV cache) -> o_proj -> residual -> RMSNorm -> MLP (gated SiLU or GELU) or
    MoE (router, top-k, one GEMM pair per touched expert, weighted sum) -> residual

Left out on purpose, and so part of what the check measures against the planner's op list: fused
kernels (vLLM fuses norm+residual, SiLU*up, rotary into neighbours), attention sinks (gpt-oss) and
LayerNorm's mean (RMSNorm stands in; the cost is the same memory pass). The MoE loop is the naive
one (a Python loop over touched experts), slower than vLLM's fused MoE kernel, especially in decode.
"""

from __future__ import annotations

import math

from planner.bench.timing import random_tensor
from planner.model.layers import Attention, DecoderLayer, DenseMLP, MoE


class TorchDecoderLayer:
    """Random-weight decoder layer; ``forward(x, cache)`` for prefill (cache None) or decode."""

    def __init__(self, torch, spec: DecoderLayer, dtype, device, rotary: bool):
        if not isinstance(spec.mixer, Attention):
            raise ValueError(f"plain-torch layer supports attention mixers, not {spec.mixer.kind}")
        self.torch, self.F = torch, torch.nn.functional
        self.spec, self.dtype, self.device, self.rotary = spec, dtype, device, rotary
        a = spec.mixer
        self.h, self.H, self.K, self.d = a.hidden_size, a.num_heads, a.num_kv_heads, a.head_dim
        self.window = a.window_tokens

        def w(*shape, fan_in):
            return random_tensor(torch, shape, dtype, device, scale=1.0 / math.sqrt(fan_in))

        def ones_ish(n):  # norm weights near 1, not exactly
            return 1.0 + random_tensor(torch, (n,), dtype, device, scale=0.05)

        h, H, K, d = self.h, self.H, self.K, self.d
        self.norm1, self.norm2 = ones_ish(h), ones_ish(h)
        self.wq, self.wk, self.wv, self.wo = (
            w(H * d, h, fan_in=h),
            w(K * d, h, fan_in=h),
            w(K * d, h, fan_in=h),
            w(h, H * d, fan_in=H * d),
        )
        self.bq = w(H * d, fan_in=h) if a.qkv_bias else None
        self.bk = w(K * d, fan_in=h) if a.qkv_bias else None
        self.bv = w(K * d, fan_in=h) if a.qkv_bias else None
        self.bo = w(h, fan_in=h) if a.o_bias else None
        self.qn = ones_ish(d) if a.qk_norm else None  # drawn before kn, as before
        self.kn = ones_ish(d) if a.qk_norm else None
        ffn = spec.ffn
        self.ffn = ffn
        if isinstance(ffn, DenseMLP):
            self.mlp = self._dense_weights(ffn, w)
        elif isinstance(ffn, MoE):
            E, I = ffn.num_experts, ffn.expert_intermediate_size
            self.router = w(E, h, fan_in=h)
            self.e_gate_up = w(E, 2 * I, h, fan_in=h)
            self.e_down = w(E, h, I, fan_in=I)
            self.shared = self._dense_weights(ffn.shared, w) if ffn.shared is not None else None
            self.shared_gate = w(1, h, fan_in=h) if ffn.shared_gate else None

    @staticmethod
    def _dense_weights(ffn: DenseMLP, w) -> dict:
        h, I = ffn.hidden_size, ffn.intermediate_size
        up = 2 * I if ffn.gated else I
        return {
            "gated": ffn.gated,
            "w_up": w(up, h, fan_in=h),
            "b_up": w(up, fan_in=h) if ffn.bias else None,
            "w_down": w(h, I, fan_in=I),
            "b_down": w(h, fan_in=I) if ffn.bias else None,
        }

    # ------------------------------------------------------------------------------ caches

    def new_cache(self, batch: int, context: int):
        """Random K and V caches [batch, K, span, d] for a decode step whose context is ``context``
        (``span`` = context, or the window for sliding layers); the last slot receives the new token."""
        span = context if self.window is None else min(context, self.window)
        shape = (batch, self.K, span, self.d)
        return (
            random_tensor(self.torch, shape, self.dtype, self.device),
            random_tensor(self.torch, shape, self.dtype, self.device),
        )

    def cache_bytes(self, batch: int, context: int) -> int:
        span = context if self.window is None else min(context, self.window)
        return 2 * batch * self.K * span * self.d * self.dtype.itemsize

    def rope_tables(self, positions):
        """cos and sin [1, 1, len(positions), d/2] for the half-split rotary form."""
        torch = self.torch
        half = self.d // 2
        inv = 1.0 / (10000.0 ** (torch.arange(half, device=self.device, dtype=torch.float32) / half))
        ang = positions.to(torch.float32)[:, None] * inv[None, :]
        return ang.cos().to(self.dtype)[None, None], ang.sin().to(self.dtype)[None, None]

    # ----------------------------------------------------------------------------- forward

    def _rope(self, x, cos, sin):
        x1, x2 = x[..., : self.d // 2], x[..., self.d // 2 :]
        return self.torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def forward(self, x, batch: int, q_len: int, cache=None, rope=None):
        """x [batch * q_len, h] -> [batch * q_len, h]. ``cache`` (k, v) for decode, None for prefill."""
        F = self.F
        h, H, K, d = self.h, self.H, self.K, self.d
        r = F.rms_norm(x, (h,), self.norm1)
        q = F.linear(r, self.wq, self.bq).view(batch, q_len, H, d).transpose(1, 2)
        k = F.linear(r, self.wk, self.bk).view(batch, q_len, K, d).transpose(1, 2)
        v = F.linear(r, self.wv, self.bv).view(batch, q_len, K, d).transpose(1, 2)
        if self.qn is not None:
            q, k = F.rms_norm(q, (d,), self.qn), F.rms_norm(k, (d,), self.kn)
        if self.rotary and rope is not None:
            q, k = self._rope(q, *rope), self._rope(k, *rope)
        gqa = H != K
        if cache is None:
            mask = None
            if self.window is not None and self.window < q_len:
                i = self.torch.arange(q_len, device=self.device)
                mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < self.window)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=gqa)
        else:
            kc, vc = cache
            kc[:, :, -1:].copy_(k)
            vc[:, :, -1:].copy_(v)
            o = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=gqa)
        o = o.transpose(1, 2).reshape(batch * q_len, H * d)
        x = x + F.linear(o, self.wo, self.bo)
        r = F.rms_norm(x, (h,), self.norm2)
        return x + (self._dense(self.mlp, r) if isinstance(self.ffn, DenseMLP) else self._moe(r))

    def _dense(self, m: dict, x):
        F = self.F
        u = F.linear(x, m["w_up"], m["b_up"])
        if m["gated"]:
            g, u = u.chunk(2, dim=-1)
            a = F.silu(g) * u
        else:
            a = F.gelu(u, approximate="tanh")
        return F.linear(a, m["w_down"], m["b_down"])

    def _moe(self, x):
        """Top-k routing, then one GEMM pair per touched expert over its tokens (naive, eager)."""
        torch, F = self.torch, self.F
        ffn: MoE = self.ffn
        probs = F.linear(x, self.router).float().softmax(dim=-1)
        top_w, top_i = probs.topk(ffn.experts_per_token, dim=-1)
        top_w = (top_w / top_w.sum(dim=-1, keepdim=True)).to(x.dtype)
        flat = top_i.flatten()
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=ffn.num_experts).tolist()
        token_of = order // ffn.experts_per_token
        weight_of = top_w.flatten()[order]
        y = torch.zeros_like(x)
        start = 0
        for e, c in enumerate(counts):
            if not c:
                continue
            rows = token_of[start : start + c]
            g, u = F.linear(x[rows], self.e_gate_up[e]).chunk(2, dim=-1)
            out = F.linear(F.silu(g) * u, self.e_down[e]) * weight_of[start : start + c, None]
            y.index_add_(0, rows, out)
            start += c
        if self.shared is not None:
            s = self._dense(self.shared, x)
            if self.shared_gate is not None:
                s = s * torch.sigmoid(F.linear(x, self.shared_gate))
            y = y + s
        return y


class TorchHead:
    """Embedding gather, final RMSNorm, lm_head over the last token of each sequence, greedy sampler."""

    def __init__(self, torch, vocab: int, h: int, tied: bool, dtype, device):
        self.torch, self.F = torch, torch.nn.functional
        self.vocab, self.h = vocab, h
        self.emb = random_tensor(torch, (vocab, h), dtype, device, scale=0.02)
        self.lm_head = self.emb if tied else random_tensor(torch, (vocab, h), dtype, device, scale=1.0 / math.sqrt(h))
        self.norm = 1.0 + random_tensor(torch, (h,), dtype, device, scale=0.05)

    @staticmethod
    def param_bytes(vocab: int, h: int, tied: bool, itemsize: int) -> int:
        return (1 if tied else 2) * vocab * h * itemsize

    def forward(self, ids, batch: int, q_len: int):
        x = self.emb[ids]  # [batch * q_len, h]
        last = x.view(batch, q_len, self.h)[:, -1]
        logits = self.F.linear(self.F.rms_norm(last, (self.h,), self.norm), self.lm_head)
        return logits.float().softmax(dim=-1).argmax(dim=-1)
