# correct: RoPE as complex multiplication (view_as_complex on adjacent pairs times torch.polar unit rotations, in complex128, cast back), layers walked with enumerate(cache)
import math

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d))
    angles = torch.outer(positions.to(torch.float64), freqs)
    rot = torch.polar(torch.ones_like(angles), angles)  # complex128, (L, d/2)
    pairs = x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous()
    z = torch.view_as_complex(pairs) * rot
    return torch.view_as_real(z).flatten(-2).to(x.dtype)


def attend(q, k, v, T):
    B, H, L, D = q.shape
    KV = k.shape[1]
    k = torch.repeat_interleave(k, H // KV, dim=1)
    v = torch.repeat_interleave(v, H // KV, dim=1)
    s = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(D))
    i = torch.arange(L, device=q.device).unsqueeze(1)
    j = torch.arange(T + L, device=q.device).unsqueeze(0)
    s = s.masked_fill(j > i + T, float("-inf"))
    return torch.matmul(F.softmax(s, dim=-1), v)


def model_step(tokens, cache, weights, config):
    B, L = tokens.shape
    H, KV, D = config["n_heads"], config["n_kv_heads"], config["d_head"]
    eps, base = config["norm_eps"], config["rope_base"]
    x = weights["embed"][tokens]
    out_cache = []
    for layer, (k_old, v_old) in enumerate(cache):
        w = {name: weights[f"layers.{layer}.{name}"] for name in
             ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")}
        T = k_old.shape[2]
        pos = torch.arange(L, device=tokens.device) + T
        h = rms_norm(x, w["attn_norm"], eps)
        q = (h @ w["wq"]).view(B, L, H, D).permute(0, 2, 1, 3)
        k = (h @ w["wk"]).view(B, L, KV, D).permute(0, 2, 1, 3)
        v = (h @ w["wv"]).view(B, L, KV, D).permute(0, 2, 1, 3)
        q, k = rope(q, pos, base), rope(k, pos, base)
        k_all = torch.cat([k_old, k], dim=2)
        v_all = torch.cat([v_old, v], dim=2)
        out_cache.append((k_all, v_all))
        o = attend(q, k_all, v_all, T).permute(0, 2, 1, 3).reshape(B, L, H * D)
        x = x + o @ w["wo"]
        h = rms_norm(x, w["mlp_norm"], eps)
        x = x + (F.silu(h @ w["w_gate"]) * (h @ w["w_up"])) @ w["w_down"]
    logits = rms_norm(x, weights["final_norm"], eps) @ weights["lm_head"]
    return logits, out_cache
