# bug: attends over the old cache and appends the new keys afterwards; only with an empty cache (the prompt) does it attend over the new tokens
# expect-kind: values
# expect-misconception: attend-before-append
import math

import torch
import torch.nn.functional as F


def rope(x, positions, base=10000.0):
    """Turn the adjacent pairs (x[..., 2i], x[..., 2i+1]) by positions * base ** (-2i / d)."""
    d = x.shape[-1]
    i = torch.arange(0, d, 2, device=x.device, dtype=torch.float64)
    freqs = base ** (-i / d)                                       # (d/2,)
    angles = positions.to(torch.float64)[:, None] * freqs[None, :]  # (L, d/2)
    cos = angles.cos().to(x.dtype)
    sin = angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return out.flatten(-2)


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def attention(q, k_cache, v_cache):
    """q (B, H, L, dh) are the last L positions of the keys in k_cache, v_cache (B, H_kv, n, dh)."""
    B, H, L, dh = q.shape
    n = k_cache.shape[2]
    group = H // k_cache.shape[1]
    k = k_cache.repeat_interleave(group, dim=1)
    v = v_cache.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(dh)             # (B, H, L, n)
    mask = torch.ones(L, n, dtype=torch.bool, device=q.device).tril(diagonal=n - L)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def model_step(tokens, cache, weights, config):
    n_heads, n_kv, dh = config["n_heads"], config["n_kv_heads"], config["d_head"]
    eps = config["norm_eps"]
    x = weights["embed"][tokens]
    B, L, _ = x.shape
    new_cache = []
    for layer in range(config["n_layers"]):
        p = f"layers.{layer}."
        k_cache, v_cache = cache[layer]
        T = k_cache.shape[2]
        pos = torch.arange(T, T + L, device=tokens.device)

        h = rms_norm(x, weights[p + "attn_norm"], eps)
        q = (h @ weights[p + "wq"]).view(B, L, n_heads, dh).transpose(1, 2)
        k = (h @ weights[p + "wk"]).view(B, L, n_kv, dh).transpose(1, 2)
        v = (h @ weights[p + "wv"]).view(B, L, n_kv, dh).transpose(1, 2)
        q = rope(q, pos, config["rope_base"])
        k = rope(k, pos, config["rope_base"])

        if T == 0:
            # the prompt: nothing cached yet, so the prompt attends to itself
            out = attention(q, k, v)
        else:
            # decoding: the new tokens read the cache, then go into it
            out = attention(q, k_cache, v_cache)
        k_cache = torch.cat([k_cache, k], dim=2)
        v_cache = torch.cat([v_cache, v], dim=2)
        new_cache.append((k_cache, v_cache))
        out = out.transpose(1, 2).reshape(B, L, n_heads * dh)
        x = x + out @ weights[p + "wo"]

        h = rms_norm(x, weights[p + "mlp_norm"], eps)
        gate = F.silu(h @ weights[p + "w_gate"])
        up = h @ weights[p + "w_up"]
        x = x + (gate * up) @ weights[p + "w_down"]

    logits = rms_norm(x, weights["final_norm"], eps) @ weights["lm_head"]
    return logits, new_cache
