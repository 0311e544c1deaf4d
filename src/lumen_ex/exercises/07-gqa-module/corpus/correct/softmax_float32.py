"""Correct: the softmax taken in float32 at least (a safer half-precision softmax), then cast back to
the module's dtype; heads expanded with expand + reshape; a causal bias of zeros and -inf added."""

import math

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        if n_kv_heads <= 0:
            raise ValueError("n_kv_heads <= 0")
        if n_heads % n_kv_heads != 0:
            raise ValueError("n_heads is not a multiple of n_kv_heads")
        if d_model % n_heads != 0:
            raise ValueError("d_model is not a multiple of n_heads")
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.o_proj = nn.Linear(n_heads * self.d_head, d_model, bias=False)

    def forward(self, x, causal=True):
        B, L, _ = x.shape
        H, Hkv, d = self.n_heads, self.n_kv_heads, self.d_head
        q = self.q_proj(x).view(B, L, H, d).permute(0, 2, 1, 3)
        k = self.k_proj(x).view(B, L, Hkv, d).permute(0, 2, 1, 3)
        v = self.v_proj(x).view(B, L, Hkv, d).permute(0, 2, 1, 3)
        k = k[:, :, None].expand(B, Hkv, H // Hkv, L, d).reshape(B, H, L, d)
        v = v[:, :, None].expand(B, Hkv, H // Hkv, L, d).reshape(B, H, L, d)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        if causal:
            bias = torch.zeros(L, L, dtype=scores.dtype, device=x.device)
            bias = bias.masked_fill(torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            scores = scores + bias
        work = torch.promote_types(scores.dtype, torch.float32)
        w = torch.softmax(scores.to(work), dim=-1).to(scores.dtype)
        out = torch.matmul(w, v).permute(0, 2, 1, 3).reshape(B, L, H * d)
        return self.o_proj(out)
