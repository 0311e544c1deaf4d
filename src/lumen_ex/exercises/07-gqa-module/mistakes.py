"""Known wrong versions of exercise 7, computed in float64 on the test's own input and weights.

When a learner's output differs from the reference, the suite compares it with each variant here and
names the first one that matches. Every variant is the module's forward pass with exactly one thing
done differently (:func:`forward`'s keyword knobs), computed from the same weights (the reference's
state_dict, which the learner's module loaded). The mistakes that change the module's parameters
(K/V projected to d_model, a bias, parameters not registered) are not values: the suite names them
from the parameters the module declares and from its strict load (suite/test_gqa_module.py).
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant


def _split(t, n: int, d_head: int, split: str):
    """(B, L, n * d_head) -> (B, n, L, d_head); split="wrong" is view(B, n, L, d_head) on the same memory."""
    B, L, _ = t.shape
    if split == "wrong":
        return t.reshape(B, n, L, d_head)                              # (B, n, L, d_head), scrambled
    return t.reshape(B, L, n, d_head).transpose(1, 2)                  # (B, n, L, d_head)


def forward(x, state, n_heads: int, n_kv_heads: int, causal: bool = True, *, expand: str = "interleave",
            split: str = "right", scale: float | None = None, mask: str | None = None, fill: str = "-inf",
            o_proj: bool = True, merge: str = "right"):
    """The module's forward pass in float64 with one knob turned. ``state``: the four weights by their
    state_dict names (nn.Linear layout, (out, in)).

    expand: "interleave" (query head h reads KV head h // group) or "repeat" (KV heads tiled).
    split: "right" or "wrong" (heads split with view(B, n, L, d_head)).
    mask: None (causal when ``causal``, none otherwise), "none", "causal" or "no-diagonal" (token i sees
    0..i-1); fill: "-inf" or "min" (a finite fill: a row with nothing to see averages every value).
    o_proj: False returns the merged heads without the output projection.
    merge: "right" or "wrong" (the heads merged by reshape(B, L, H * d_head) without the transpose back)."""
    x = x.to(torch.float64)
    w = {k: v.to(torch.float64) for k, v in state.items()}
    B, L, d_model = x.shape
    d_head = d_model // n_heads
    q = _split(x @ w["q_proj.weight"].T, n_heads, d_head, split)       # (B, H, L, d_head)
    k = _split(x @ w["k_proj.weight"].T, n_kv_heads, d_head, split)    # (B, H_kv, L, d_head)
    v = _split(x @ w["v_proj.weight"].T, n_kv_heads, d_head, split)    # (B, H_kv, L, d_head)
    group = n_heads // n_kv_heads
    if expand == "interleave":
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)   # (B, H, L, d_head)
    else:
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)                     # (B, H, L, d_head)
    s = 1 / math.sqrt(d_head) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * s                              # (B, H, L, L)
    mask = mask or ("causal" if causal else "none")
    if mask != "none":
        ones = torch.ones(L, L, dtype=torch.bool)
        seen = ones.tril() if mask == "causal" else ones.tril(-1)      # (L, L)
        value = float("-inf") if fill == "-inf" else torch.finfo(torch.float64).min
        scores = scores.masked_fill(~seen, value)
    out = torch.softmax(scores, dim=-1) @ v                             # (B, H, L, d_head)
    out = out.transpose(1, 2) if merge == "right" else out              # (B, L, H, d_head), or scrambled
    out = out.reshape(B, L, n_heads * d_head)                           # (B, L, H * d_head)
    return out @ w["o_proj.weight"].T if o_proj else out                # (B, L, d_model)


# The mistakes of the output: (id, sentence, fix, knobs, when) with when(n_heads, n_kv_heads, causal).
CANDIDATES = [
    ("gqa-repeat", "your output equals grouped-query attention with the KV heads tiled (repeat) instead of grouped",
     "query head h reads KV head h // (n_heads // n_kv_heads), which is what repeat_interleave(n_heads // "
     "n_kv_heads, dim=1) gives", dict(expand="repeat"), lambda h, kv, c: 1 < kv < h),
    ("heads-split-wrong-order", "your output equals attention with the projections split into heads by "
     "view(B, n_heads, L, d_head)", "the last axis holds each token's heads side by side: view(B, L, n_heads, "
     "d_head), then .transpose(1, 2) to (B, n_heads, L, d_head)", dict(split="wrong"), lambda h, kv, c: True),
    ("heads-merged-wrong-order", "your output equals attention whose heads were merged by reshape(B, L, "
     "n_heads * d_head) straight from (B, n_heads, L, d_head), without the transpose back",
     "bring each token's heads side by side first: out.transpose(1, 2).reshape(B, L, n_heads * d_head)",
     dict(merge="wrong"), lambda h, kv, c: h > 1),
    ("scale-1/sqrt(d_model)", "your output equals attention scaled by 1/sqrt(d_model)",
     "the scale uses the width of one head: 1 / sqrt(d_head), d_head = d_model // n_heads",
     dict(scale="d_model"), lambda h, kv, c: h > 1),
    ("causal-mask-missing", "your output equals attention without the causal mask",
     "with causal=True token i may attend only to tokens 0..i: mask the scores above the diagonal with -inf "
     "before the softmax", dict(mask="none"), lambda h, kv, c: c),
    ("causal-flag-ignored", "your output with causal=False equals causal attention: the flag is ignored",
     "mask only when causal is True (if causal: ...); with causal=False every token attends to every token",
     dict(mask="causal"), lambda h, kv, c: not c),
    ("causal-no-diagonal", "your output equals attention in which token i sees tokens 0..i-1, not itself "
     "(tril(-1), triu(0) or a strict comparison), so the first token sees nothing",
     "a token may attend to itself: mask only the keys after it, torch.ones(L, L).tril() keeps the diagonal",
     dict(mask="no-diagonal"), lambda h, kv, c: c),
    ("causal-no-diagonal", "your output equals attention in which token i sees tokens 0..i-1, not itself "
     "(filled with a finite value, the first token averages every value)",
     "a token may attend to itself: mask only the keys after it, torch.ones(L, L).tril() keeps the diagonal",
     dict(mask="no-diagonal", fill="min"), lambda h, kv, c: c),
    ("o-proj-skipped", "your output equals the merged heads without the output projection: o_proj is never applied",
     "end with self.o_proj(out) on the merged (B, L, n_heads * d_head) heads", dict(o_proj=False),
     lambda h, kv, c: True),
]


def output_variants(x, state, n_heads: int, n_kv_heads: int, causal: bool = True) -> list[Variant]:
    """Wrong outputs for this input and these weights, each with its mistake named."""
    found = []
    d_model = x.shape[-1]
    for ident, sentence, fix, knobs, when in CANDIDATES:
        if not when(n_heads, n_kv_heads, causal):
            continue
        if knobs.get("scale") == "d_model":
            knobs = dict(knobs, scale=1 / math.sqrt(d_model))
        found.append(Variant(ident, sentence, forward(x, state, n_heads, n_kv_heads, causal, **knobs), fix))
    return found


# Every mistake this suite names, by id, with the sentence shown to the learner. The value ids come
# from the variants above; the parameter ids from the suite's checks of named_parameters() and of the
# strict load.
CATALOGUE: dict[str, str] = {
    # the forward pass
    "gqa-repeat": "GQA heads expanded with repeat instead of repeat_interleave",
    "heads-split-wrong-order": "heads split with view(B, n_heads, L, d_head) instead of view(B, L, n_heads, "
                               "d_head).transpose(1, 2)",
    "heads-merged-wrong-order": "heads merged with reshape(B, L, n_heads * d_head) without transpose(1, 2) back",
    "scale-1/sqrt(d_model)": "scores scaled by 1/sqrt(d_model) instead of 1/sqrt(d_head)",
    "causal-mask-missing": "no causal mask even with causal=True",
    "causal-flag-ignored": "the causal flag ignored: the mask applied with causal=False too",
    "causal-no-diagonal": "the causal mask hides the diagonal: a token cannot see itself",
    "o-proj-skipped": "the output projection o_proj never applied",
    # the parameters
    "kv-projected-to-d-model": "k_proj and v_proj project to d_model instead of n_kv_heads * d_head",
    "params-not-registered": "the projections are not registered parameters of the module (plain tensor "
                             "attributes, kept in a Python list or dict, or created outside __init__)",
    "param-names-differ": "the projections are not named q_proj, k_proj, v_proj and o_proj",
    "projection-bias": "the projections have a bias (nn.Linear's default): the contract says bias=False",
    "sizes-not-validated": "impossible sizes not refused with ValueError in __init__",
    **{k: v for k, v in GENERIC_MISCONCEPTIONS.items() if k not in ("not-bool", "outputs-swapped")},
}
