# bug: runs the step through an nn.MultiheadAttention whose projections are set to the given weights
# expect-kind: forbidden
# expect-misconception: forbidden-api
import torch
from torch import nn


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)
    k_cache = torch.cat([k_cache, k_new], dim=2)
    v_cache = torch.cat([v_cache, v_new], dim=2)
    group = n_heads // n_kv_heads
    width = n_heads * d_head
    keys = k_cache.repeat_interleave(group, dim=1).transpose(1, 2).reshape(B, T + 1, width)
    values = v_cache.repeat_interleave(group, dim=1).transpose(1, 2).reshape(B, T + 1, width)
    mha = nn.MultiheadAttention(width, n_heads, bias=False, batch_first=True).to(x_t.dtype).to(x_t.device)
    with torch.no_grad():
        eye = torch.eye(width, dtype=x_t.dtype, device=x_t.device)
        mha.in_proj_weight.copy_(torch.cat([eye, eye, eye]))
        mha.out_proj.weight.copy_(eye)
    y, _ = mha((x_t @ w_q)[:, None], keys, values, need_weights=False)
    return y[:, 0] @ w_o, k_cache, v_cache
