# correct: RoPE from a cos/sin table built with torch.outer and repeat_interleave'd to full width (rotation via an in-pair swap), explicit (L, T+L) boolean mask from torch.triu(diagonal=T+1), additive -inf bias
import math

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope_tables(positions, d, base, dtype):
    inv_freq = base ** (-torch.arange(0, d, 2, device=positions.device, dtype=torch.float64) / d)
    angles = torch.outer(positions.to(torch.float64), inv_freq)  # (L, d/2)
    angles = angles.repeat_interleave(2, dim=-1)  # (L, d): each angle for both entries of its pair
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rope(x, positions, base=10000.0):
    cos, sin = rope_tables(positions, x.shape[-1], base, x.dtype)
    pairs = x.unflatten(-1, (-1, 2))
    swapped = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)  # (-x1, x0) per pair
    return x * cos + swapped * sin


def causal_bias(L, T, dtype, device):
    blocked = torch.triu(torch.ones(L, T + L, dtype=torch.bool, device=device), diagonal=T + 1)
    zero = torch.zeros(L, T + L, dtype=dtype, device=device)
    return zero.masked_fill(blocked, float("-inf"))


def model_step(tokens, cache, weights, config):
    B, L = tokens.shape
    H, KV, D = config["n_heads"], config["n_kv_heads"], config["d_head"]
    eps = config["norm_eps"]
    x = F.embedding(tokens, weights["embed"])
    new_cache = []
    for i in range(config["n_layers"]):
        p = f"layers.{i}."
        k_cache, v_cache = cache[i]
        T = k_cache.shape[2]
        pos = torch.arange(T, T + L, device=tokens.device)

        h = rms_norm(x, weights[p + "attn_norm"], eps)
        q = (h @ weights[p + "wq"]).unflatten(-1, (H, D)).transpose(1, 2)
        k = (h @ weights[p + "wk"]).unflatten(-1, (KV, D)).transpose(1, 2)
        v = (h @ weights[p + "wv"]).unflatten(-1, (KV, D)).transpose(1, 2)
        q = rope(q, pos, config["rope_base"])
        k = rope(k, pos, config["rope_base"])
        k_cache = torch.cat([k_cache, k], dim=2)
        v_cache = torch.cat([v_cache, v], dim=2)
        new_cache.append((k_cache, v_cache))

        kk = k_cache.repeat_interleave(H // KV, dim=1)
        vv = v_cache.repeat_interleave(H // KV, dim=1)
        scores = q @ kk.transpose(-1, -2) * D ** -0.5 + causal_bias(L, T, x.dtype, tokens.device)
        out = scores.softmax(-1) @ vv
        x = x + out.transpose(1, 2).flatten(2) @ weights[p + "wo"]

        h = rms_norm(x, weights[p + "mlp_norm"], eps)
        x = x + (F.silu(h @ weights[p + "w_gate"]) * (h @ weights[p + "w_up"])) @ weights[p + "w_down"]

    logits = rms_norm(x, weights["final_norm"], eps) @ weights["lm_head"]
    return logits, new_cache
