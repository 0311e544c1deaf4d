# bug: forgets the 1/sqrt(d) scale on the scores
# expect-kind: values
# expect-misconception: no-scale
import torch


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
    out_t = (torch.softmax(q_t[:, :, None, :] @ k.transpose(-2, -1), dim=-1) @ v)[:, :, 0, :]
    return out_t, k_cache, v_cache
