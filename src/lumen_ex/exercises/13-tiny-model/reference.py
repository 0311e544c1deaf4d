"""Reference for exercise 13: one decoding step of a small llama-style language model.

The model (its weights: data/tiny_model.safetensors, read by suite/model_file.py, trained by
tools/train_tiny_model.py):
token embedding, then ``n_layers`` blocks of

    x = x + attention(rms_norm(x, attn_norm))      # grouped-query, RoPE, KV cache (exercises 2 and 4)
    x = x + swiglu_mlp(rms_norm(x, mlp_norm))      # w_down(silu(h @ w_gate) * (h @ w_up))

then a final RMSNorm and the output projection to one logit per character of the vocabulary.
Every projection is ``x @ W`` with ``W`` laid out ``(in, out)``, as in exercise 2. Shapes: B batch,
L new tokens, T tokens already cached, D d_model, H query heads, H_kv key/value heads, d_head the
width of one head, F the MLP's hidden width, V the vocabulary.
"""

from __future__ import annotations

import math

import torch

# -------------------------------------------------------------------------------------------------
# The model


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis: x (..., D), weight (D,)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope(x, positions, base):
    """Exercise 4's rotation: adjacent pairs (x[..., 2i], x[..., 2i+1]) turned by positions * base ** (-2i / d).
    x (..., L, d), positions (L,). Differentiable, in x's dtype (the angles in float64)."""
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64, device=x.device)               # (d/2,)
    angles = positions.to(torch.float64)[:, None] * float(base) ** (-2.0 * i / d)  # (L, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)                 # (L, d/2)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]                                    # (..., L, d/2)
    return torch.stack([x_even * cos - x_odd * sin, x_even * sin + x_odd * cos], dim=-1).flatten(-2)


def split_heads(x, n):
    """(B, L, n * d_head) -> (B, n, L, d_head)"""
    B, L, width = x.shape
    return x.reshape(B, L, n, width // n).transpose(1, 2)


def merge_heads(x):
    """(B, n, L, d_head) -> (B, L, n * d_head)"""
    B, n, L, d_head = x.shape
    return x.transpose(1, 2).reshape(B, L, n * d_head)


def attention(x, k_cache, v_cache, weights, prefix, config):
    """One attention block on the normalised x (B, L, D) with the layer's cache (B, H_kv, T, d_head):
    (its output (B, L, D), the grown caches (B, H_kv, T + L, d_head))."""
    H, H_kv = config["n_heads"], config["n_kv_heads"]
    B, L, _ = x.shape
    T = k_cache.shape[2]
    positions = torch.arange(T, T + L, device=x.device)                          # (L,) where the new tokens sit
    q = rope(split_heads(x @ weights[prefix + "wq"], H), positions, config["rope_base"])      # (B, H, L, d_head)
    k = rope(split_heads(x @ weights[prefix + "wk"], H_kv), positions, config["rope_base"])   # (B, H_kv, L, d_head)
    v = split_heads(x @ weights[prefix + "wv"], H_kv)                                         # (B, H_kv, L, d_head)
    k_all = torch.cat([k_cache, k], dim=2)                                        # (B, H_kv, T + L, d_head)
    v_all = torch.cat([v_cache, v], dim=2)
    group = H // H_kv                                                             # query head h reads KV head h // group
    keys, values = k_all.repeat_interleave(group, dim=1), v_all.repeat_interleave(group, dim=1)  # (B, H, T + L, d_head)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])                 # (B, H, L, T + L)
    # New token i sits at position T + i and sees the cache and the new tokens up to itself.
    seen = torch.arange(T + L, device=x.device)[None, :] <= positions[:, None]    # (L, T + L)
    scores = scores.masked_fill(~seen, float("-inf"))
    out = merge_heads(torch.softmax(scores, dim=-1) @ values)                    # (B, L, H * d_head)
    return out @ weights[prefix + "wo"], k_all, v_all                            # (B, L, D)


def mlp(x, weights, prefix):
    """SwiGLU: w_down(silu(x @ w_gate) * (x @ w_up)); x (B, L, D) -> (B, L, D) through (B, L, F)."""
    gate = torch.nn.functional.silu(x @ weights[prefix + "w_gate"])             # (B, L, F)
    return (gate * (x @ weights[prefix + "w_up"])) @ weights[prefix + "w_down"]


def model_step(tokens, cache, weights, config):
    """Run the model on L new tokens after T cached ones.

    tokens (B, L) int64; cache: a list of n_layers pairs (k_cache, v_cache), each (B, H_kv, T, d_head)
    (T = 0 before the first step); weights: name -> tensor; config: the model's sizes. Returns the
    logits (B, L, V) of the token after each new one, and the grown cache (the caller's is untouched).
    """
    eps = config["norm_eps"]
    x = weights["embed"][tokens]                                                  # (B, L, D)
    grown = []
    for i, (k_cache, v_cache) in enumerate(cache):
        prefix = f"layers.{i}."
        out, k_all, v_all = attention(rms_norm(x, weights[prefix + "attn_norm"], eps), k_cache, v_cache,
                                      weights, prefix, config)
        grown.append((k_all, v_all))
        x = x + out
        x = x + mlp(rms_norm(x, weights[prefix + "mlp_norm"], eps), weights, prefix)
    logits = rms_norm(x, weights["final_norm"], eps) @ weights["lm_head"]        # (B, L, V)
    return logits, grown


def empty_cache(config, B=1, dtype=torch.float32, device="cpu"):
    """n_layers pairs of (B, H_kv, 0, d_head) tensors: the cache before the first step."""
    shape = (B, config["n_kv_heads"], 0, config["d_head"])
    return [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
            for _ in range(config["n_layers"])]


def generate(step, prompt, n_new, weights, config):
    """Greedy decoding: the prompt (B, L) in one step, then one token per step; ``step`` is model_step
    or a variant. Returns (the new tokens (B, n_new), the smallest gap between the two largest
    logits of any chosen token)."""
    logits, cache = step(prompt, empty_cache(config, prompt.shape[0], weights["embed"].dtype), weights, config)
    out, gap = [], math.inf
    for _ in range(n_new):
        top = logits[:, -1].topk(2, dim=-1).values                                # (B, 2)
        gap = min(gap, float((top[:, 0] - top[:, 1]).min()))
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)                          # (B, 1)
        out.append(nxt)
        logits, cache = step(nxt, cache, weights, config)
    return torch.cat(out, dim=1), gap
