# bug: projects with F.linear(x, w_q) as for an nn.Linear weight: F.linear computes x @ W.T, and these weights are (d_model, out), meant for x @ W
# expect-kind: exception
# expect-misconception: projection-transposed
# expect-test: test_returns_three_tensors
import math

import torch
import torch.nn.functional as F


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = F.linear(x, w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)
    k = F.linear(x, w_k).reshape(B, L, n_kv, d_head).transpose(1, 2)
    v = F.linear(x, w_v).reshape(B, L, n_kv, d_head).transpose(1, 2)
    kk = k.repeat_interleave(n_heads // n_kv, dim=1)
    vv = v.repeat_interleave(n_heads // n_kv, dim=1)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    w = torch.softmax((q @ kk.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(~mask, float("-inf")), dim=-1)
    return F.linear((w @ vv).transpose(1, 2).reshape(B, L, -1), w_o), k, v
