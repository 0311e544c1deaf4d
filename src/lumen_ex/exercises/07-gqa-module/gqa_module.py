"""Exercise 7: a grouped-query attention module. Read README.md in this folder first."""

import math

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    """Self-attention with n_heads query heads that share n_kv_heads key/value heads.

    d_head = d_model // n_heads. Four bias-free nn.Linear layers, named exactly:
      q_proj: d_model -> n_heads * d_head
      k_proj, v_proj: d_model -> n_kv_heads * d_head
      o_proj: n_heads * d_head -> d_model
    """

    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        # TODO: raise ValueError when n_kv_heads < 1, n_heads % n_kv_heads != 0 or d_model % n_heads != 0.
        # TODO: create q_proj, k_proj, v_proj and o_proj here, as attributes (nn.Linear(..., bias=False)).
        raise NotImplementedError("GroupedQueryAttention.__init__ is not written yet")

    def forward(self, x, causal=True):
        """x: (B, L, d_model) -> y: (B, L, d_model). With causal=True token i attends to tokens 0..i."""
        # TODO: project x and split into heads: (B, L, n * d_head) -> (B, L, n, d_head) -> (B, n, L, d_head).
        # TODO: query head h reads KV head h // (n_heads // n_kv_heads): expand K and V to n_heads heads.
        # TODO: scores scaled by 1 / sqrt(d_head), the causal mask when causal is True, softmax over the keys.
        # TODO: merge the heads back to (B, L, n_heads * d_head) and apply o_proj.
        raise NotImplementedError("GroupedQueryAttention.forward is not written yet")
