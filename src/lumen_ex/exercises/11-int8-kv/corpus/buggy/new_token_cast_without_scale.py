# bug: computes the new token's scales but casts its key and value to int8 without dividing by them
# expect-kind: values
# expect-misconception: new-token-cast-without-scale
# expect-test: test_decode_values[gqa]
import math

import torch


def quantize_kv(x):
    amax = x.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / 127)
    x_q = torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8)
    return x_q, scale


def int8_decode_step(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t):
    _, ks_new = quantize_kv(k_t)
    _, vs_new = quantize_kv(v_t)
    k_q = torch.cat([k_q, k_t.to(torch.int8)[:, :, None, :]], dim=2)
    k_scale = torch.cat([k_scale, ks_new[:, :, None, :]], dim=2)
    v_q = torch.cat([v_q, v_t.to(torch.int8)[:, :, None, :]], dim=2)
    v_scale = torch.cat([v_scale, vs_new[:, :, None, :]], dim=2)
    group = q_t.shape[1] // k_q.shape[1]
    k = (k_q.to(q_t.dtype) * k_scale).repeat_interleave(group, dim=1)
    v = (v_q.to(q_t.dtype) * v_scale).repeat_interleave(group, dim=1)
    scores = (q_t.unsqueeze(2) @ k.transpose(-2, -1)) / math.sqrt(q_t.shape[-1])
    out = (torch.softmax(scores, dim=-1) @ v).squeeze(2)
    return out, k_q, k_scale, v_q, v_scale
