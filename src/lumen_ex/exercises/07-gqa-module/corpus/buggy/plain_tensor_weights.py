# bug: keeps the weights as plain tensor attributes, which are not parameters of the module
# expect-kind: property
# expect-misconception: params-not-registered
# expect-test: test_parameters

import math

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        if n_kv_heads < 1 or n_heads % n_kv_heads != 0 or d_model % n_heads != 0:
            raise ValueError("impossible sizes")
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_head = d_model // n_heads
        self.w_q = torch.randn(n_heads * self.d_head, d_model) / math.sqrt(d_model)
        self.w_k = torch.randn(n_kv_heads * self.d_head, d_model) / math.sqrt(d_model)
        self.w_v = torch.randn(n_kv_heads * self.d_head, d_model) / math.sqrt(d_model)
        self.w_o = torch.randn(d_model, n_heads * self.d_head) / math.sqrt(d_model)

    def forward(self, x, causal=True):
        B, L, _ = x.shape
        q = (x @ self.w_q.T).view(B, L, self.n_heads, self.d_head).transpose(1, 2)
        k = (x @ self.w_k.T).view(B, L, self.n_kv_heads, self.d_head).transpose(1, 2)
        v = (x @ self.w_v.T).view(B, L, self.n_kv_heads, self.d_head).transpose(1, 2)
        group = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if causal:
            mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        out = out.transpose(1, 2).reshape(B, L, self.n_heads * self.d_head)
        return out @ self.w_o.T
