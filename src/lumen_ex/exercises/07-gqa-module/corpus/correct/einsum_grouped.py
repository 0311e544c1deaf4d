"""Correct: no expansion of K and V at all: the query heads are grouped as (B, H_kv, group, L, d_head)
and einsum contracts each group against its one KV head."""

import math

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        if n_kv_heads < 1:
            raise ValueError("n_kv_heads must be at least 1")
        if n_heads % n_kv_heads:
            raise ValueError("n_kv_heads must divide n_heads")
        if d_model % n_heads:
            raise ValueError("n_heads must divide d_model")
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.o_proj = nn.Linear(n_heads * self.d_head, d_model, bias=False)

    def forward(self, x, causal=True):
        B, L, _ = x.shape
        g = self.n_heads // self.n_kv_heads
        q = self.q_proj(x).reshape(B, L, self.n_kv_heads, g, self.d_head)
        k = self.k_proj(x).reshape(B, L, self.n_kv_heads, self.d_head)
        v = self.v_proj(x).reshape(B, L, self.n_kv_heads, self.d_head)
        scores = torch.einsum("bikgd,bjkd->bkgij", q, k) / math.sqrt(self.d_head)
        if causal:
            pos = torch.arange(L, device=x.device)
            scores = scores.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
        w = scores.softmax(dim=-1)
        out = torch.einsum("bkgij,bjkd->bikgd", w, v)
        return self.o_proj(out.reshape(B, L, self.n_heads * self.d_head))
