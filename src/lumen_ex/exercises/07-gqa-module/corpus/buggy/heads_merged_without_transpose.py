# bug: merges the heads with reshape(B, L, n_heads * d_head) straight from (B, n_heads, L, d_head), without transpose(1, 2) back, so each token's output mixes the rows of other tokens
# expect-kind: values
# expect-misconception: heads-merged-wrong-order

import math

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        if n_kv_heads < 1 or n_heads % n_kv_heads != 0 or d_model % n_heads != 0:
            raise ValueError("bad sizes")
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
        q = self.q_proj(x).view(B, L, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k_proj(x).view(B, L, self.n_kv_heads, self.d_head).transpose(1, 2).repeat_interleave(g, dim=1)
        v = self.v_proj(x).view(B, L, self.n_kv_heads, self.d_head).transpose(1, 2).repeat_interleave(g, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if causal:
            mask = torch.triu(torch.ones(L, L, dtype=torch.bool, device=x.device), 1)
            scores = scores.masked_fill(mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        out = out.reshape(B, L, self.n_heads * self.d_head)
        return self.o_proj(out)
