# bug: calls torch's scaled_dot_product_attention over the occupied slots instead of writing the attention
# expect-kind: forbidden
# expect-misconception: forbidden-api
import torch
import torch.nn.functional as F


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[:, :, slot] = k_t
    v_cache[:, :, slot] = v_t
    n = min(n_seen + 1, C)
    group = q_t.shape[1] // k_cache.shape[1]
    k = k_cache[:, :, :n].repeat_interleave(group, dim=1)
    v = v_cache[:, :, :n].repeat_interleave(group, dim=1)
    out_t = F.scaled_dot_product_attention(q_t[:, :, None, :], k, v)[:, :, 0, :]
    return out_t, k_cache, v_cache
