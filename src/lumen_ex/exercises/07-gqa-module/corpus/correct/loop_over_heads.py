"""Correct: one query head at a time, each reading KV head h // group; the heads concatenated."""

import math

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        bad = n_kv_heads < 1 or n_heads % n_kv_heads != 0 or d_model % n_heads != 0
        if bad:
            raise ValueError(f"bad sizes: d_model={d_model}, n_heads={n_heads}, n_kv_heads={n_kv_heads}")
        d_head = d_model // n_heads
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_head
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=False)
        self.o_proj = nn.Linear(n_heads * d_head, d_model, bias=False)

    def forward(self, x, causal=True):
        L = x.shape[1]
        d = self.d_head
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        group = self.n_heads // self.n_kv_heads
        heads = []
        for h in range(self.n_heads):
            kv = h // group
            qh = q[..., h * d:(h + 1) * d]
            kh = k[..., kv * d:(kv + 1) * d]
            vh = v[..., kv * d:(kv + 1) * d]
            s = qh @ kh.transpose(1, 2) / math.sqrt(d)
            if causal:
                keep = torch.tril(torch.ones(L, L, dtype=torch.bool, device=x.device))
                s = torch.where(keep, s, torch.full_like(s, float("-inf")))
            heads.append(torch.softmax(s, dim=-1) @ vh)
        return self.o_proj(torch.cat(heads, dim=-1))
