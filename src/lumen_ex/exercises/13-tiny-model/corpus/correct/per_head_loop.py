# correct: attention computed one query head at a time, each reading KV head h // group by indexing (no repeat_interleave), causal check per query row; one fused QKV matmul split with torch.split
# expect-note: test_float64
import math

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps):
    variance = (x * x).mean(-1, keepdim=True)
    return weight * (x / torch.sqrt(variance + eps))


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    exponent = torch.arange(d // 2, device=x.device, dtype=torch.float32) * 2.0 / d
    freqs = torch.pow(torch.full_like(exponent, float(base)), -exponent)
    angles = positions.to(torch.float32).unsqueeze(-1) * freqs
    cos = angles.cos().to(x.dtype)
    sin = angles.sin().to(x.dtype)
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).reshape(x.shape)


def model_step(tokens, cache, weights, config):
    n_heads, n_kv, d_head = config["n_heads"], config["n_kv_heads"], config["d_head"]
    group = n_heads // n_kv
    eps = config["norm_eps"]
    batch, L = tokens.shape
    x = weights["embed"][tokens]
    result_cache = []
    for layer in range(config["n_layers"]):
        p = "layers." + str(layer) + "."
        k_cache, v_cache = cache[layer]
        T = k_cache.shape[2]
        positions = T + torch.arange(L, device=tokens.device)

        h = rms_norm(x, weights[p + "attn_norm"], eps)
        w_qkv = torch.cat([weights[p + "wq"], weights[p + "wk"], weights[p + "wv"]], dim=1)
        q_flat, k_flat, v_flat = torch.split(h @ w_qkv, [n_heads * d_head, n_kv * d_head, n_kv * d_head], dim=-1)
        q = torch.stack([q_flat[..., j * d_head:(j + 1) * d_head] for j in range(n_heads)], dim=1)
        k = torch.stack([k_flat[..., j * d_head:(j + 1) * d_head] for j in range(n_kv)], dim=1)
        v = torch.stack([v_flat[..., j * d_head:(j + 1) * d_head] for j in range(n_kv)], dim=1)
        q = rope(q, positions, config["rope_base"])
        k = rope(k, positions, config["rope_base"])
        k_cache = torch.cat([k_cache, k], dim=2)
        v_cache = torch.cat([v_cache, v], dim=2)
        result_cache.append((k_cache, v_cache))

        key_pos = torch.arange(T + L, device=tokens.device)
        visible = key_pos.unsqueeze(0) <= positions.unsqueeze(1)  # (L, T + L)
        head_outputs = []
        for hq in range(n_heads):
            kv = hq // group
            kh = k_cache[:, kv]  # (B, T + L, d_head)
            vh = v_cache[:, kv]
            s = torch.bmm(q[:, hq], kh.transpose(1, 2)) / math.sqrt(d_head)  # (B, L, T + L)
            s = torch.where(visible, s, torch.tensor(float("-inf"), dtype=s.dtype, device=s.device))
            head_outputs.append(torch.bmm(torch.softmax(s, dim=-1), vh))  # (B, L, d_head)
        merged = torch.cat(head_outputs, dim=-1)  # head j in columns j*d_head .. (j+1)*d_head
        x = x + merged @ weights[p + "wo"]

        h = rms_norm(x, weights[p + "mlp_norm"], eps)
        x = x + (F.silu(h @ weights[p + "w_gate"]) * (h @ weights[p + "w_up"])) @ weights[p + "w_down"]

    logits = rms_norm(x, weights["final_norm"], eps) @ weights["lm_head"]
    return logits, result_cache
