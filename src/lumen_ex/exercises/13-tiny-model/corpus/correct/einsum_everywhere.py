# correct: every projection, the RoPE table and both attention products written with torch.einsum; GQA via a grouped (kv, group) query axis instead of repeat_interleave
import math

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps):
    ms = torch.einsum("bld,bld->bl", x, x)[..., None] / x.shape[-1]
    return x * torch.rsqrt(ms + eps) * weight


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    idx = torch.arange(0, d // 2, device=x.device, dtype=torch.float64)
    inv = torch.pow(torch.tensor(float(base), dtype=torch.float64, device=x.device), -2.0 * idx / d)
    ang = torch.einsum("l,f->lf", positions.to(torch.float64), inv)
    c = ang.cos().to(x.dtype)
    s = ang.sin().to(x.dtype)
    a = x[..., 0::2]
    b = x[..., 1::2]
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)


def model_step(tokens, cache, weights, config):
    H = config["n_heads"]
    KV = config["n_kv_heads"]
    D = config["d_head"]
    G = H // KV
    eps = config["norm_eps"]
    B, L = tokens.shape
    x = weights["embed"][tokens]
    grown = []
    for i in range(config["n_layers"]):
        p = f"layers.{i}."
        kc, vc = cache[i]
        T = kc.shape[2]
        pos = torch.arange(T, T + L, device=tokens.device)

        h = rms_norm(x, weights[p + "attn_norm"], eps)
        q = torch.einsum("bld,dhe->bhle", h, weights[p + "wq"].reshape(-1, H, D))
        k = torch.einsum("bld,dhe->bhle", h, weights[p + "wk"].reshape(-1, KV, D))
        v = torch.einsum("bld,dhe->bhle", h, weights[p + "wv"].reshape(-1, KV, D))
        q = rope(q, pos, config["rope_base"])
        k = rope(k, pos, config["rope_base"])
        kc = torch.cat([kc, k], dim=2)
        vc = torch.cat([vc, v], dim=2)
        grown.append((kc, vc))

        qg = q.reshape(B, KV, G, L, D)  # query head h = kv * G + g reads kv head h // G
        scores = torch.einsum("bkgld,bksd->bkgls", qg, kc) / math.sqrt(D)
        keep = torch.arange(T + L, device=tokens.device)[None, :] <= pos[:, None]
        scores = scores.masked_fill(~keep, float("-inf"))
        attn = scores.softmax(dim=-1)
        out = torch.einsum("bkgls,bksd->blkgd", attn, vc).reshape(B, L, H * D)
        x = x + torch.einsum("blf,fd->bld", out, weights[p + "wo"])

        h = rms_norm(x, weights[p + "mlp_norm"], eps)
        gate = torch.einsum("bld,df->blf", h, weights[p + "w_gate"])
        up = torch.einsum("bld,df->blf", h, weights[p + "w_up"])
        x = x + torch.einsum("blf,fd->bld", F.silu(gate) * up, weights[p + "w_down"])

    hf = rms_norm(x, weights["final_norm"], eps)
    logits = torch.einsum("bld,dv->blv", hf, weights["lm_head"])
    return logits, grown
