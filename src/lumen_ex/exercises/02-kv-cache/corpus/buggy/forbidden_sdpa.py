# bug: lets F.scaled_dot_product_attention(..., enable_gqa=True) do the attention
# expect-kind: forbidden
# expect-misconception: forbidden-api
import torch
import torch.nn.functional as F


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    k_cache = torch.cat([k_cache, (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    v_cache = torch.cat([v_cache, (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    out = F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)
    return out.reshape(B, -1) @ w_o, k_cache, v_cache
