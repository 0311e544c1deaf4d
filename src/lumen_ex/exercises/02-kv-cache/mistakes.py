"""Known wrong versions of exercise 2, computed in float64 on the same inputs as the reference.

When a learner's y_t or caches differ from the reference, the harness compares them with each
variant here and names the first one that matches, so the learner reads the mistake rather than a
number. Every variant is one decode step with exactly one thing done differently; the sizes of the
hidden inputs (n_heads=6, n_kv_heads=2, every axis a distinct size) keep the variants apart.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant

Y_T, K_CACHE, V_CACHE = 0, 1, 2


def _split(x, n, order="right"):
    """(B, n * d_head) -> (B, n, 1, d_head); order="wrong" reads it as (B, d_head, n)."""
    B, width = x.shape
    if order == "wrong":
        return x.reshape(B, width // n, n).transpose(1, 2)[:, :, None, :]   # (B, n, 1, d_head)
    return x.reshape(B, n, width // n)[:, :, None, :]                        # (B, n, 1, d_head)


def _merge(out, order="right"):
    """(B, n, 1, d_head) -> (B, n * d_head); order="wrong" is the inverse of the wrong split."""
    B, n, _, d_head = out.shape
    if order == "wrong":
        return out[:, :, 0, :].transpose(1, 2).reshape(B, n * d_head)       # (B, d_head * n)
    return out[:, :, 0, :].reshape(B, n * d_head)                           # (B, n * d_head)


def _expand(kv, n_heads, how="interleave"):
    """(B, n_kv_heads, T, d_head) -> (B, n_heads, T, d_head)."""
    group = n_heads // kv.shape[1]
    return kv.repeat_interleave(group, dim=1) if how == "interleave" else kv.repeat(1, group, 1, 1)


def step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads, *, attend_to="all", position="end",
         expand="interleave", split="right", merge="right", scale=None, softmax_dim=-1, scale_after=False):
    """One decode step, with one knob turned: returns (y_t, k_cache, v_cache) in float64.

    attend_to: "all" (old and new keys), "old" (attend before appending), "new" (cache ignored) or
    "first" (a top-left causal mask: the single query sees only the first key).
    scale_after: the scale multiplies the weights after a softmax of the unscaled scores.
    position: where the new entry goes in the returned caches, "end" or "front".
    """
    n_kv_heads, d_head = k_cache.shape[1], k_cache.shape[3]
    q = _split(x_t @ w_q, n_heads, split)                             # (B, n_heads, 1, d_head)
    k_new = _split(x_t @ w_k, n_kv_heads, split)                      # (B, n_kv_heads, 1, d_head)
    v_new = _split(x_t @ w_v, n_kv_heads, split)                      # (B, n_kv_heads, 1, d_head)
    if position == "front":
        k_all, v_all = torch.cat([k_new, k_cache], dim=2), torch.cat([v_new, v_cache], dim=2)
    else:
        k_all, v_all = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    k_seen, v_seen = {"all": (k_all, v_all), "old": (k_cache, v_cache), "new": (k_new, v_new),
                      "first": (k_all[:, :, :1], v_all[:, :, :1])}[attend_to]
    k_seen, v_seen = _expand(k_seen, n_heads, expand), _expand(v_seen, n_heads, expand)  # (B, n_heads, L, d_head)
    s = 1 / math.sqrt(d_head) if scale is None else scale
    scores = q @ k_seen.transpose(-2, -1) * (1.0 if scale_after else s)   # (B, n_heads, 1, L)
    weights = torch.softmax(scores, dim=softmax_dim) * (s if scale_after else 1.0)  # (B, n_heads, 1, L)
    out = weights @ v_seen                                            # (B, n_heads, 1, d_head)
    y_t = _merge(out, merge) @ w_o                                    # (B, d_model)
    return y_t, k_all, v_all                                          # caches (B, n_kv_heads, T + 1, d_head)


def step_variants(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads, *, which: int = Y_T) -> list[Variant]:
    """Wrong answers for y_t (which=0), the returned k_cache (1) or v_cache (2), most common first."""
    args = (x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads)
    n_kv_heads, d_head, d_model = k_cache.shape[1], k_cache.shape[3], x_t.shape[1]
    if which != Y_T:
        other = V_CACHE if which == K_CACHE else K_CACHE
        name = "k_cache" if which == K_CACHE else "v_cache"
        return [
            Variant("cache-prepended", f"your {name} has the new entry first",
                    step(*args, position="front")[which],
                    "append it at the end with torch.cat([cache, new], dim=2), so the time axis runs from "
                    "oldest to newest"),
            Variant("caches-swapped", f"your {name} holds the other cache's values", step(*args)[other],
                    "return (y_t, k_cache, v_cache) in that order, keys from w_k and values from w_v"),
            Variant("new-entry-split-wrong-order", f"the new entry of your {name} is split into heads in the wrong "
                    "order", step(*args, split="wrong")[which],
                    "the projection's columns are grouped head by head, so reshape to (B, n_kv_heads, d_head), "
                    "not (B, d_head, n_kv_heads)"),
        ]
    cands = [
        ("attend-before-append", "your y_t equals attention over the old cache only",
         "append the new key and value before attending, so the newest token also sees itself",
         dict(attend_to="old")),
        ("cache-ignored", "your y_t equals attention over the new token alone",
         "the query must attend to every cached key as well as its own", dict(attend_to="new")),
    ]
    if k_cache.shape[2] >= 2:   # with one cached token, "only the first key" is attend-before-append
        cands.append(("decode-causal-mask", "your y_t equals attention in which the new query sees only the first "
                      "key, as a causal (top-left) mask makes it", "a single new query may see every cached key "
                      "and itself: it needs no mask, so drop it", dict(attend_to="first")))
    if 1 < n_kv_heads < n_heads:
        cands.append(("gqa-repeat", "your y_t equals grouped-query attention with the KV heads tiled (repeat) "
                      "instead of grouped",
                      "query head h reads KV head h // (n_heads // n_kv_heads), which is what "
                      "repeat_interleave(n_heads // n_kv_heads, dim=1) gives", dict(expand="repeat")))
    cands += [
        ("heads-split-wrong-order", "your y_t equals attention with the projections split into heads as "
         "(B, d_head, n_heads)", "the columns are grouped head by head, so reshape to (B, n_heads, d_head)",
         dict(split="wrong")),
        ("heads-split-and-merged-wrong-order", "your y_t equals attention with heads split as (B, d_head, n_heads) "
         "and merged back the same way", "the columns are grouped head by head, so split to (B, n_heads, d_head) "
         "and merge with a plain reshape to (B, n_heads * d_head)", dict(split="wrong", merge="wrong")),
        ("heads-merged-wrong-order", "your y_t equals attention whose heads are merged as (B, d_head, n_heads)",
         "merge (B, n_heads, d_head) with a plain reshape to (B, n_heads * d_head), no transpose",
         dict(merge="wrong")),
        ("softmax-over-query-axis", "your y_t equals attention whose weights are all 1 (a softmax over the "
         "size-1 query axis), so the values are summed", "normalise over the keys, dim=-1", dict(softmax_dim=-2)),
        ("no-scale", "your y_t equals attention without the 1/sqrt(d_head) scale",
         "divide the scores by math.sqrt(d_head)", dict(scale=1.0)),
        ("scale-1/sqrt(d_model)", "your y_t equals attention scaled by 1/sqrt(d_model)",
         "the scale uses the width of one head, d_head = w_q.shape[1] // n_heads", dict(scale=1 / math.sqrt(d_model))),
        ("scale-1/d_head", "your y_t equals attention scaled by 1/d_head", "the scale is 1/sqrt(d_head), a square root",
         dict(scale=1 / d_head)),
        ("scale-after-softmax", "your y_t equals attention scaled by 1/sqrt(d_head) after the softmax, so the "
         "weights of each head sum to 1/sqrt(d_head), not 1", "scale the scores before the softmax: "
         "softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head))", dict(scale_after=True)),
    ]
    if n_heads > 1:
        cands.append(("softmax-over-heads", "your y_t equals a softmax over the heads axis",
                      "normalise over the keys, dim=-1", dict(softmax_dim=1)))
    return [Variant(name, sentence, step(*args, **knobs)[Y_T], fix) for name, sentence, fix, knobs in cands]


# Every mistake this suite names, by id. Value ids come from the variants above (matched on values);
# the others from the check that catches them.
CATALOGUE = {
    "attend-before-append": "attends before appending the new token",
    "cache-ignored": "attends to the new token only",
    "decode-causal-mask": "a causal (top-left) mask inside decode_step: the new query sees only the first key",
    "scale-after-softmax": "the 1/sqrt(d_head) scale applied after the softmax",
    "projection-transposed": "projected with F.linear(x, W) or x @ W.T instead of x @ W: an exception",
    "gqa-repeat": "GQA heads expanded with repeat instead of repeat_interleave",
    "heads-split-wrong-order": "projections split into heads in the wrong order",
    "heads-split-and-merged-wrong-order": "heads split and merged in the wrong order",
    "heads-merged-wrong-order": "heads merged in the wrong order",
    "softmax-over-query-axis": "softmax over the size-1 query axis",
    "softmax-over-heads": "softmax over the heads axis",
    "no-scale": "no 1/sqrt(d_head) scale",
    "scale-1/sqrt(d_model)": "scaled by the model width",
    "scale-1/d_head": "scores divided by d_head instead of sqrt(d_head)",
    "cache-prepended": "new entry put first in the cache",
    "caches-swapped": "k_cache and v_cache returned in each other's place",
    "new-entry-split-wrong-order": "the new cache entry split into heads in the wrong order",
    # the generic ones this suite can reach (it returns no bool and takes no gradient)
    **{k: v for k, v in GENERIC_MISCONCEPTIONS.items() if k not in ("not-bool", "no-gradient", "gradient-mismatch")},
    "wrong-concat-axis": "the cache grown along the wrong axis",
    "no-output-projection": "the output projection w_o is missing",
    "token-axis-kept": "y_t keeps a size-1 token axis",
    "cache-not-grown": "the caches returned without the new token",
    "cache-expanded": "the caches stored expanded to n_heads",
    "caller-cache-mutated": "the caller's cache written in place",
    "quadratic-cost": "each step does O(T^2) work",
}

