# correct: F.rms_norm with eps=config["norm_eps"], hand-written softmax (max subtraction, exp, sum) computed in float32 via .float() and cast back, masked_fill with torch.finfo(float32).min
# expect-note: test_float64
import math

import torch
import torch.nn.functional as F


def rope(x, positions, base=10000.0):
    half = x.shape[-1] // 2
    theta = torch.exp(torch.arange(half, device=x.device, dtype=torch.float64) * (-2.0 * math.log(base) / x.shape[-1]))
    ang = positions[:, None].double() * theta[None, :]
    c, s = torch.cos(ang).type_as(x), torch.sin(ang).type_as(x)
    xr = x.reshape(*x.shape[:-1], half, 2)
    a, b = xr[..., 0], xr[..., 1]
    return torch.stack((a * c - b * s, b * c + a * s), dim=-1).reshape(x.shape)


def softmax_last(scores):
    shifted = scores - scores.amax(dim=-1, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=-1, keepdim=True)


def model_step(tokens, cache, weights, config):
    B, L = tokens.shape
    H, KV, D = config["n_heads"], config["n_kv_heads"], config["d_head"]
    eps = config["norm_eps"]
    d_model = config["d_model"]
    x = weights["embed"].index_select(0, tokens.reshape(-1)).reshape(B, L, d_model)
    grown = []
    for i in range(config["n_layers"]):
        p = f"layers.{i}."
        k_old, v_old = cache[i]
        T = k_old.shape[2]
        pos = torch.arange(T, T + L, device=tokens.device)

        h = F.rms_norm(x, (d_model,), weights[p + "attn_norm"], eps)
        q = (h @ weights[p + "wq"]).reshape(B, L, H, D).transpose(1, 2)
        k = (h @ weights[p + "wk"]).reshape(B, L, KV, D).transpose(1, 2)
        v = (h @ weights[p + "wv"]).reshape(B, L, KV, D).transpose(1, 2)
        q = rope(q, pos, config["rope_base"])
        k = rope(k, pos, config["rope_base"])
        k_all = torch.cat((k_old, k), dim=2)
        v_all = torch.cat((v_old, v), dim=2)
        grown.append((k_all, v_all))

        k_rep = k_all.repeat_interleave(H // KV, dim=1)
        v_rep = v_all.repeat_interleave(H // KV, dim=1)
        scores = torch.matmul(q.float(), k_rep.float().transpose(-2, -1)) / math.sqrt(D)
        future = torch.arange(T + L, device=tokens.device)[None, :] > pos[:, None]
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
        probs = softmax_last(scores)
        out = torch.matmul(probs, v_rep.float()).type_as(x)
        x = x + out.transpose(1, 2).reshape(B, L, H * D) @ weights[p + "wo"]

        h = F.rms_norm(x, (d_model,), weights[p + "mlp_norm"], eps)
        x = x + (F.silu(h @ weights[p + "w_gate"]) * (h @ weights[p + "w_up"])) @ weights[p + "w_down"]

    logits = F.rms_norm(x, (d_model,), weights["final_norm"], eps) @ weights["lm_head"]
    return logits, grown
