"""Known wrong versions of exercise 13, computed in float64 on the same inputs as the reference.

Every variant is the whole model with exactly one thing done differently (one keyword knob of
:func:`model_step`): the RoPE pairing or positions, the GQA expansion, when the new token is
appended, the mask's diagonal, the scale, the norms, the MLP. When a learner's logits or cache
differ from the reference, the suite compares them with each variant and names the one they match.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant, exercise

ref = exercise(__file__).reference


def _rope(x, positions, base, how):
    """exercise 4's adjacent pairs ("right"), GPT-NeoX's halves ("half"), or no rotation ("none")."""
    if how == "none":
        return x
    if how == "right":
        return ref.rope(x, positions, base)
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    angles = positions.to(torch.float64)[:, None] * float(base) ** (-2.0 * i / d)   # (L, d/2)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)  # (L, d)
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)               # rotate_half
    return x * cos + rotated * sin


def _norm(x, weight, eps, how):
    if how == "no-weight":
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    if how == "layer-norm":
        return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, None, eps)
    return ref.rms_norm(x, weight, eps)


def model_step(tokens, cache, weights, config, *, rope="right", positions="right", expand="interleave",
               attend="all", mask="right", scale=None, norm="right", mlp="right"):
    """The model with one knob turned: (logits, cache) in float64.

    positions: "right" (T .. T+L-1) or "restart" (0 .. L-1 at every call, the cache's length ignored).
    attend: "all" (cache and new tokens) or "old" (the cache only when there is one: attending before appending).
    mask: "right" (new token i sees keys 0 .. T+i), "top-left" (keys 0 .. i: the (L, T+L) mask's diagonal
    not shifted by T) or "none".
    mlp: "right" or "silu-on-up" (the SiLU on x @ w_up, not on the gate).
    """
    w = {k: v.to(torch.float64) for k, v in weights.items()}
    H, H_kv, eps, base = config["n_heads"], config["n_kv_heads"], config["norm_eps"], config["rope_base"]
    x = w["embed"][tokens]                                                         # (B, L, D)
    B, L, D = x.shape
    grown = []
    for i, (k_cache, v_cache) in enumerate(cache):
        p = f"layers.{i}."
        k_cache, v_cache = k_cache.to(torch.float64), v_cache.to(torch.float64)
        T = k_cache.shape[2]
        pos = torch.arange(L) if positions == "restart" else torch.arange(T, T + L)    # (L,)
        h = _norm(x, w[p + "attn_norm"], eps, norm)
        q = _rope(ref.split_heads(h @ w[p + "wq"], H), pos, base, rope)             # (B, H, L, d_head)
        k = _rope(ref.split_heads(h @ w[p + "wk"], H_kv), pos, base, rope)          # (B, H_kv, L, d_head)
        v = ref.split_heads(h @ w[p + "wv"], H_kv)
        k_all, v_all = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)  # (B, H_kv, T+L, d_head)
        grown.append((k_all, v_all))
        k_seen, v_seen = (k_cache, v_cache) if attend == "old" and T > 0 else (k_all, v_all)
        group = H // H_kv
        if expand == "interleave":
            k_seen, v_seen = k_seen.repeat_interleave(group, dim=1), v_seen.repeat_interleave(group, dim=1)
        else:
            k_seen, v_seen = k_seen.repeat(1, group, 1, 1), v_seen.repeat(1, group, 1, 1)
        s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = q @ k_seen.transpose(-2, -1) * s                                   # (B, H, L, n_keys)
        n_keys = k_seen.shape[2]
        shift = (n_keys - L) if mask == "right" else 0
        if mask != "none":
            seen = torch.arange(n_keys)[None, :] <= torch.arange(L)[:, None] + shift   # (L, n_keys)
            scores = scores.masked_fill(~seen, float("-inf"))
        x = x + ref.merge_heads(torch.softmax(scores, dim=-1) @ v_seen) @ w[p + "wo"]
        h = _norm(x, w[p + "mlp_norm"], eps, norm)
        gate, up = h @ w[p + "w_gate"], h @ w[p + "w_up"]                            # (B, L, F)
        if mlp == "silu-on-up":
            act = gate * torch.nn.functional.silu(up)
        else:
            act = torch.nn.functional.silu(gate) * up
        x = x + act @ w[p + "w_down"]
    x = _norm(x, w["final_norm"], eps, norm)
    return x @ w["lm_head"], grown                                                 # (B, L, V)


# (id, what the learner's logits equal, the fix, the knobs)
KNOBS = [
    ("rope-rotate-half", "the model with RoPE pairing x[i] with x[i + d/2] (rotate_half)",
     "exercise 4's convention pairs adjacent entries: (x[..., 2i], x[..., 2i+1])", dict(rope="half")),
    ("rope-missing", "the model without RoPE", "rotate the queries and keys of every layer with exercise 4's rope()",
     dict(rope="none")),
    ("rope-positions-restart", "the model with every call's positions restarting at 0",
     "the new tokens sit at positions T .. T+L-1, T = k_cache.shape[2] (the tokens already cached)",
     dict(positions="restart")),
    ("gqa-repeat", "the model with the KV heads tiled (repeat) instead of grouped",
     "query head h reads KV head h // (n_heads // n_kv_heads): repeat_interleave(n_heads // n_kv_heads, dim=1)",
     dict(expand="repeat")),
    ("attend-before-append", "the model attending to the cache before the new token is appended",
     "append the new keys and values first (exercise 2): the newest token must see itself", dict(attend="old")),
    ("mask-not-shifted", "the model whose causal mask ignores the cache (new token i sees keys 0 .. i)",
     "new token i sits at position T + i and sees keys 0 .. T + i: shift the mask's diagonal by T",
     dict(mask="top-left")),
    ("causal-mask-missing", "the model without a causal mask", "new token i must not see the new tokens after it",
     dict(mask="none")),
    ("scale-1/sqrt(d_model)", "the model with scores scaled by 1/sqrt(d_model)",
     "scale by 1/sqrt(d_head), the width of one head (config['d_head'])", dict(scale="d_model")),
    ("rmsnorm-weight-missing", "the model whose RMSNorms leave out their weight",
     "multiply the normalised x by the norm's weight: x * rsqrt(mean(x^2) + eps) * weight", dict(norm="no-weight")),
    ("layer-norm-not-rms", "the model with LayerNorm (the mean subtracted) instead of RMSNorm",
     "RMSNorm does not subtract the mean: x * rsqrt(mean(x^2, dim=-1) + eps) * weight", dict(norm="layer-norm")),
    ("mlp-silu-on-up", "the model with the SiLU on h @ w_up instead of the gate",
     "the gate is the activated one: F.silu(h @ w_gate) * (h @ w_up)", dict(mlp="silu-on-up")),
]


def knobbed(knobs):
    """model_step with these knobs, as a function of (tokens, cache, weights, config)."""
    def step(tokens, cache, weights, config):
        turned = dict(knobs)
        if turned.get("scale") == "d_model":
            turned["scale"] = 1 / math.sqrt(config["d_model"])
        return model_step(tokens, cache, weights, config, **turned)
    return step


def logits_variants(tokens, cache, weights, config, *, which=0) -> list[Variant]:
    """Wrong answers for the logits (which=0) or layer 0's returned k_cache (1) or v_cache (2).

    Two mistakes that give the same answer on this input cannot be told apart here (one new token
    after a cache: RoPE at position 0 is no RoPE at all): both are left out, and the tests whose inputs
    tell them apart name the one it is."""
    values = []
    for name, sentence, fix, knobs in KNOBS:
        logits, grown = knobbed(knobs)(tokens, cache, weights, config)
        value = logits if which == 0 else grown[0][which - 1]
        what = "logits" if which == 0 else ("layer 0's k_cache", "layer 0's v_cache")[which - 1]
        values.append(Variant(name, f"your {what} equal {sentence}", value, fix))
    return [v for v in values
            if not any(o is not v and o.value.shape == v.value.shape and torch.allclose(o.value, v.value, atol=1e-9,
                                                                                        rtol=1e-9)
                       for o in values)]


# Every mistake this suite names, by id (docs/authoring.md).
CATALOGUE = {
    "rope-rotate-half": "RoPE with the rotate_half pairing instead of exercise 4's adjacent pairs",
    "rope-missing": "no RoPE",
    "rope-positions-restart": "RoPE positions restarting at 0 at every call",
    "gqa-repeat": "GQA heads expanded with repeat instead of repeat_interleave",
    "attend-before-append": "attends before appending the new token",
    "mask-not-shifted": "the causal mask not shifted by the cache's length",
    "causal-mask-missing": "no causal mask over the new tokens",
    "scale-1/sqrt(d_model)": "scaled by the model width",
    "rmsnorm-weight-missing": "RMSNorm without its weight",
    "layer-norm-not-rms": "LayerNorm instead of RMSNorm",
    "mlp-silu-on-up": "the SiLU on the up projection instead of the gate",
    "cache-not-grown": "the cache returned without the new tokens",
    "caller-cache-mutated": "the caller's cache written in place",
    **{k: v for k, v in GENERIC_MISCONCEPTIONS.items() if k not in ("not-bool", "no-gradient", "gradient-mismatch")},
}
