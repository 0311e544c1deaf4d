# expect-note: test_dtype[float64] test_gradients_flow
"""Correct: the softmax runs in float32 and is cast back with .type_as(q), as llama and
transformers write it (`softmax(scores.float(), dim=-1).type_as(q)`): more accurate in float16 and
bfloat16, and float64 inputs get float64 results carrying float32 rounding, which the grader
accepts with a note (docs/tolerances.md)."""

import math

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))   # (..., L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores.float(), dim=-1).type_as(q)                  # (..., L_q, L_k)
    return torch.matmul(weights, v), weights                                # (..., L_q, d_v)


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)         # (L_q, 1)
    k_pos = torch.arange(L_k, device=device)[None, :]                       # (1, L_k)
    return k_pos <= q_pos                                                   # (L_q, L_k)
