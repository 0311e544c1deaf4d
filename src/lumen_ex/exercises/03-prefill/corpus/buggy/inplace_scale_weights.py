# bug: folds the 1/sqrt(d_head) scale into w_q in place (w_q.mul_), which changes the caller's weights
# expect-kind: side-effect
# expect-misconception: inputs-modified
# expect-test: test_inputs_unchanged
import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    w_q.mul_(1 / math.sqrt(d_head))
    q = (x @ w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)
    k = (x @ w_k).reshape(B, L, n_kv, d_head).transpose(1, 2)
    v = (x @ w_v).reshape(B, L, n_kv, d_head).transpose(1, 2)
    kk = k.repeat_interleave(n_heads // n_kv, dim=1)
    vv = v.repeat_interleave(n_heads // n_kv, dim=1)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    w = torch.softmax((q @ kk.transpose(-2, -1)).masked_fill(~mask, float("-inf")), dim=-1)
    return (w @ vv).transpose(1, 2).reshape(B, L, -1) @ w_o, k, v
