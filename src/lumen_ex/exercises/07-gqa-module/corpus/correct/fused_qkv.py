"""Correct: the three projections done as one matmul with the weights concatenated at call time
(the parameters stay the four named layers), heads split with unflatten, K/V expanded by indexing."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        if not (n_kv_heads >= 1 and n_heads % n_kv_heads == 0 and d_model % n_heads == 0):
            raise ValueError("need n_kv_heads >= 1, n_kv_heads | n_heads and n_heads | d_model")
        self.h, self.h_kv = n_heads, n_kv_heads
        self.dh = d_model // n_heads
        self.q_proj = nn.Linear(d_model, n_heads * self.dh, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.dh, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.dh, bias=False)
        self.o_proj = nn.Linear(n_heads * self.dh, d_model, bias=False)

    def forward(self, x, causal=True):
        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight], dim=0)
        qkv = F.linear(x, w)
        q, k, v = qkv.split([self.h * self.dh, self.h_kv * self.dh, self.h_kv * self.dh], dim=-1)
        q = q.unflatten(-1, (self.h, self.dh)).transpose(1, 2)
        k = k.unflatten(-1, (self.h_kv, self.dh)).transpose(1, 2)
        v = v.unflatten(-1, (self.h_kv, self.dh)).transpose(1, 2)
        which = torch.arange(self.h, device=x.device) // (self.h // self.h_kv)
        k, v = k[:, which], v[:, which]
        scores = q @ k.mT * (1.0 / math.sqrt(self.dh))
        if causal:
            L = x.shape[1]
            future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.o_proj(out.transpose(1, 2).flatten(2))
