"""Correct: batched bmm over (B * H) matrices, a hand-written softmax (max subtracted, exp, sum),
K and V repeated with repeat_interleave on the flat KV-head axis."""

import math

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        for ok, why in ((n_kv_heads >= 1, "n_kv_heads < 1"), (n_heads % max(n_kv_heads, 1) == 0, "n_heads % n_kv_heads"),
                        (d_model % n_heads == 0, "d_model % n_heads")):
            if not ok:
                raise ValueError(why)
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.o_proj = nn.Linear(n_heads * self.d_head, d_model, bias=False)

    def forward(self, x, causal=True):
        B, L, D = x.shape
        H, Hkv, d = self.n_heads, self.n_kv_heads, self.d_head
        q = self.q_proj(x).reshape(B, L, H, d).transpose(1, 2).reshape(B * H, L, d)
        k = self.k_proj(x).reshape(B, L, Hkv, d).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
        v = self.v_proj(x).reshape(B, L, Hkv, d).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
        k, v = k.reshape(B * H, L, d), v.reshape(B * H, L, d)
        s = torch.bmm(q, k.transpose(1, 2)) * (d ** -0.5)
        if causal:
            idx = torch.arange(L, device=x.device)
            s = s.masked_fill(idx[None, :] > idx[:, None], -math.inf)
        s = s - s.amax(dim=-1, keepdim=True)
        e = s.exp()
        p = e / e.sum(dim=-1, keepdim=True)
        out = torch.bmm(p, v).reshape(B, H, L, d).transpose(1, 2).reshape(B, L, D)
        return self.o_proj(out)
