# bug: adds a float causal mask made with torch.full(...) and no dtype=: float32, so float16 scores are promoted and y comes back float32
# expect-kind: dtype
# expect-misconception: new-tensor-dtype
# expect-test: test_dtype[float16]
import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)
    k = (x @ w_k).reshape(B, L, n_kv, d_head).transpose(1, 2)
    v = (x @ w_v).reshape(B, L, n_kv, d_head).transpose(1, 2)
    kk = k.repeat_interleave(n_heads // n_kv, dim=1)
    vv = v.repeat_interleave(n_heads // n_kv, dim=1)
    bias = torch.full((L, L), float("-inf"), device=x.device).triu(1)
    scores = q @ kk.transpose(-2, -1) / math.sqrt(d_head) + bias
    w = torch.softmax(scores, dim=-1)
    return (w @ vv.to(w.dtype)).transpose(1, 2).reshape(B, L, -1) @ w_o.to(w.dtype), k, v
