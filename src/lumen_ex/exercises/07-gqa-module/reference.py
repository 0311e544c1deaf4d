"""Reference for exercise 7: a grouped-query attention module, as the seed chapter writes it.

Shapes: B batch, L tokens, d_model width; n_heads query heads and n_kv_heads key/value heads, each
d_head = d_model // n_heads wide (n_kv_heads divides n_heads; query head h reads KV head
h // (n_heads // n_kv_heads)). Four bias-free nn.Linear layers hold every parameter; nn.Linear
computes x @ weight.T, so q_proj.weight is (n_heads * d_head, d_model).
"""

from __future__ import annotations

import math

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    """Causal (by default) self-attention with n_heads query heads sharing n_kv_heads key/value heads."""

    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        if n_heads < 1 or n_kv_heads < 1:
            raise ValueError(f"n_heads and n_kv_heads must be at least 1, got {n_heads} and {n_kv_heads}")
        if n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads = {n_kv_heads} must divide n_heads = {n_heads}")
        if d_model % n_heads != 0:
            raise ValueError(f"n_heads = {n_heads} must divide d_model = {d_model}")
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.o_proj = nn.Linear(n_heads * self.d_head, d_model, bias=False)

    def split_heads(self, t, n):
        """(B, L, n * d_head) -> (B, n, L, d_head): each token's columns are grouped head by head."""
        B, L, _ = t.shape
        return t.reshape(B, L, n, self.d_head).transpose(1, 2)         # (B, n, L, d_head)

    def forward(self, x, causal=True):
        B, L, _ = x.shape
        q = self.split_heads(self.q_proj(x), self.n_heads)              # (B, H, L, d_head)
        k = self.split_heads(self.k_proj(x), self.n_kv_heads)           # (B, H_kv, L, d_head)
        v = self.split_heads(self.v_proj(x), self.n_kv_heads)           # (B, H_kv, L, d_head)
        group = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(group, dim=1)                           # (B, H, L, d_head)
        v = v.repeat_interleave(group, dim=1)                           # (B, H, L, d_head)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.d_head)     # (B, H, L, L)
        if causal:
            # L_q = L_k = L: bottom-right and top-left alignment agree; query i sees keys 0..i.
            seen = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()    # (L, L)
            scores = scores.masked_fill(~seen, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v                         # (B, H, L, d_head)
        out = out.transpose(1, 2).reshape(B, L, self.n_heads * self.d_head)     # (B, L, H * d_head)
        return self.o_proj(out)                                         # (B, L, d_model)
