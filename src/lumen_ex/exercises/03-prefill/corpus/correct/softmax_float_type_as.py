# expect-note: test_dtype[float64]
"""Correct: the softmax in float32, cast back with type_as (as llama and transformers do); a
float64 result then carries float32 rounding, which passes with a note."""

import math

import torch
import torch.nn.functional as F


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv_heads = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(B, L, n_heads, d_head).permute(0, 2, 1, 3)
    k = (x @ w_k).reshape(B, L, n_kv_heads, d_head).permute(0, 2, 1, 3)
    v = (x @ w_v).reshape(B, L, n_kv_heads, d_head).permute(0, 2, 1, 3)
    n_rep = n_heads // n_kv_heads
    keys = torch.repeat_interleave(k, n_rep, dim=1)
    values = torch.repeat_interleave(v, n_rep, dim=1)
    scores = torch.matmul(q, keys.transpose(2, 3)) / math.sqrt(d_head)
    i = torch.arange(L, device=x.device)
    scores = scores.masked_fill(i[None, :] > i[:, None], torch.finfo(scores.dtype).min)
    weights = F.softmax(scores.float(), dim=-1).type_as(q)
    out = torch.matmul(weights, values).permute(0, 2, 1, 3).reshape(B, L, -1)
    return out @ w_o, k, v
