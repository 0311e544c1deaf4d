"""Correct: a precomputed additive mask (0 on and below the diagonal, -inf above), in the inputs'
dtype and on their device, added to the scores; heads expanded with expand + reshape."""

import math

import torch


def causal_bias(L, like):
    return torch.full((L, L), float("-inf"), dtype=like.dtype, device=like.device).triu(1)   # (L, L)


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    rep = n_heads // n_kv
    q = (x @ w_q).view(B, L, n_heads, d_head).transpose(1, 2)
    k = (x @ w_k).view(B, L, n_kv, d_head).transpose(1, 2)        # (B, H_kv, L, d_head)
    v = (x @ w_v).view(B, L, n_kv, d_head).transpose(1, 2)
    k_big = k[:, :, None].expand(B, n_kv, rep, L, d_head).reshape(B, n_heads, L, d_head)
    v_big = v[:, :, None].expand(B, n_kv, rep, L, d_head).reshape(B, n_heads, L, d_head)
    scores = q @ k_big.transpose(-2, -1) / math.sqrt(d_head) + causal_bias(L, q)
    out = torch.softmax(scores, dim=-1) @ v_big                    # (B, H, L, d_head)
    y = out.transpose(1, 2).contiguous().view(B, L, n_heads * d_head) @ w_o
    return y, k, v
