# bug: splits and merges every projection as (B, L, d_head, n): consistent, but the wrong columns form each head
# expect-kind: values
# expect-misconception: heads-split-and-merged-wrong-order
import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    def split(t, n):
        return t.reshape(B, L, t.shape[-1] // n, n).permute(0, 3, 1, 2)      # (B, n, L, d_head), wrong columns

    q, k, v = split(x @ w_q, n_heads), split(x @ w_k, n_kv), split(x @ w_v, n_kv)
    g = n_heads // n_kv
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    w = torch.softmax((q @ kk.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(~mask, float("-inf")), dim=-1)
    out = w @ vv
    return out.permute(0, 2, 3, 1).reshape(B, L, n_heads * d_head) @ w_o, k, v
