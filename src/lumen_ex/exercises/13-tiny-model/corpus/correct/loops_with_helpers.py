# correct: plain loop over layers with small helper functions (rms_norm, rope, attention, mlp) and repeat_interleave
import math

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    i = torch.arange(d // 2, device=x.device, dtype=torch.float64)
    freqs = base ** (-2.0 * i / d)
    angles = positions.to(torch.float64)[:, None] * freqs[None, :]
    cos = torch.cos(angles).to(x.dtype)
    sin = torch.sin(angles).to(x.dtype)
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    first = x0 * cos - x1 * sin
    second = x0 * sin + x1 * cos
    return torch.stack([first, second], dim=-1).flatten(-2)


def split_heads(t, n):
    b, l, width = t.shape
    return t.reshape(b, l, n, width // n).transpose(1, 2)


def merge_heads(t):
    b, n, l, dh = t.shape
    return t.transpose(1, 2).reshape(b, l, n * dh)


def attention(q, k_all, v_all, T):
    n_heads = q.shape[1]
    n_kv = k_all.shape[1]
    group = n_heads // n_kv
    k = k_all.repeat_interleave(group, dim=1)
    v = v_all.repeat_interleave(group, dim=1)
    L = q.shape[2]
    d_head = q.shape[-1]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(d_head)
    q_pos = torch.arange(L, device=q.device)[:, None] + T
    k_pos = torch.arange(T + L, device=q.device)[None, :]
    allowed = k_pos <= q_pos
    scores = scores.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return w @ v


def mlp(h, w_gate, w_up, w_down):
    return (F.silu(h @ w_gate) * (h @ w_up)) @ w_down


def model_step(tokens, cache, weights, config):
    eps = config["norm_eps"]
    n_heads = config["n_heads"]
    n_kv = config["n_kv_heads"]
    x = weights["embed"][tokens]
    L = tokens.shape[1]
    new_cache = []
    for i in range(config["n_layers"]):
        p = f"layers.{i}."
        k_cache, v_cache = cache[i]
        T = k_cache.shape[2]
        positions = torch.arange(T, T + L, device=tokens.device)

        h = rms_norm(x, weights[p + "attn_norm"], eps)
        q = split_heads(h @ weights[p + "wq"], n_heads)
        k = split_heads(h @ weights[p + "wk"], n_kv)
        v = split_heads(h @ weights[p + "wv"], n_kv)
        q = rope(q, positions, config["rope_base"])
        k = rope(k, positions, config["rope_base"])
        k_cache = torch.cat([k_cache, k], dim=2)
        v_cache = torch.cat([v_cache, v], dim=2)
        new_cache.append((k_cache, v_cache))

        out = attention(q, k_cache, v_cache, T)
        x = x + merge_heads(out) @ weights[p + "wo"]

        h = rms_norm(x, weights[p + "mlp_norm"], eps)
        x = x + mlp(h, weights[p + "w_gate"], weights[p + "w_up"], weights[p + "w_down"])

    logits = rms_norm(x, weights["final_norm"], eps) @ weights["lm_head"]
    return logits, new_cache
