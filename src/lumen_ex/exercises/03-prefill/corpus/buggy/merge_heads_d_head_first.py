# bug: merges the heads as (B, L, d_head, n_heads): permute(0, 2, 3, 1) before the reshape
# expect-kind: values
# expect-misconception: heads-merged-wrong-order
import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)
    k = (x @ w_k).reshape(B, L, n_kv, d_head).transpose(1, 2)
    v = (x @ w_v).reshape(B, L, n_kv, d_head).transpose(1, 2)
    g = n_heads // n_kv
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    w = torch.softmax((q @ kk.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(~mask, float("-inf")), dim=-1)
    out = w @ vv
    return out.permute(0, 2, 3, 1).reshape(B, L, n_heads * d_head) @ w_o, k, v
