# bug: lets F.scaled_dot_product_attention(..., is_causal=True, enable_gqa=True) do the attention
# expect-kind: forbidden
# expect-misconception: forbidden-api
import torch.nn.functional as F


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)
    k = (x @ w_k).reshape(B, L, n_kv, d_head).transpose(1, 2)
    v = (x @ w_v).reshape(B, L, n_kv, d_head).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return out.transpose(1, 2).reshape(B, L, -1) @ w_o, k, v
