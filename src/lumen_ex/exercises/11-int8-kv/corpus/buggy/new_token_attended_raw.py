# bug: appends the new token's int8 entries but attends with its raw k_t and v_t, so this step's output is not the one the cache will give from now on
# expect-kind: values
# expect-misconception: new-token-attended-raw
import math
import torch


def quantize_kv(x):
    amax = x.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / 127)
    codes = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
    return codes, scale


def int8_decode_step(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t):
    k_old = k_q.to(q_t.dtype) * k_scale
    v_old = v_q.to(q_t.dtype) * v_scale
    k = torch.cat([k_old, k_t[:, :, None]], 2)
    v = torch.cat([v_old, v_t[:, :, None]], 2)
    kc, ks = quantize_kv(k_t)
    vc, vs = quantize_kv(v_t)
    k_q = torch.cat([k_q, kc[:, :, None]], 2)
    v_q = torch.cat([v_q, vc[:, :, None]], 2)
    k_scale = torch.cat([k_scale, ks[:, :, None]], 2)
    v_scale = torch.cat([v_scale, vs[:, :, None]], 2)
    B, H, d = q_t.shape
    g = H // k.shape[1]
    k = k.repeat_interleave(g, 1)
    v = v.repeat_interleave(g, 1)
    s = (q_t[:, :, None, :] @ k.transpose(-1, -2)) / math.sqrt(d)
    o = s.softmax(-1) @ v
    return o[:, :, 0], k_q, k_scale, v_q, v_scale
