"""Known wrong versions of exercise 3, computed in float64 on the same inputs as the reference.

When a learner's y or caches differ from the reference, the harness compares them with each variant
here and names the first one that matches, so the learner reads the mistake rather than a number.
Every variant is the prefill with exactly one thing done differently; the sizes of the hidden inputs
(n_heads=6, n_kv_heads=2, every axis a distinct size) keep the variants apart
(tests/e2e/test_variants.py checks that on the hidden tests' own inputs).
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, MATCH_TOLERANCE_FLOAT64, Variant

Y, K_CACHE, V_CACHE = 0, 1, 2


def split(x, n, order="right"):
    """(B, L, n * d_head) -> (B, n, L, d_head). order="wrong" reads the columns as (d_head, n);
    "no-transpose" reshapes straight to (B, n, L, d_head), mixing the tokens' features."""
    B, L, width = x.shape
    d = width // n
    if order == "wrong":
        return x.reshape(B, L, d, n).permute(0, 3, 1, 2)                 # (B, n, L, d_head)
    if order == "no-transpose":
        return x.reshape(B, n, L, d)                                     # (B, n, L, d_head), scrambled
    return x.reshape(B, L, n, d).transpose(1, 2)                         # (B, n, L, d_head)


def merge(out, order="right"):
    """(B, n, L, d_head) -> (B, L, n * d_head); "wrong" is the inverse of the wrong split,
    "no-transpose" a plain reshape of the (B, n, L, d_head) memory."""
    B, n, L, d = out.shape
    if order == "wrong":
        return out.permute(0, 2, 3, 1).reshape(B, L, d * n)             # (B, L, d_head * n)
    if order == "no-transpose":
        return out.reshape(B, L, n * d)                                  # (B, L, n * d_head), scrambled
    return out.transpose(1, 2).reshape(B, L, n * d)                      # (B, L, n * d_head)


def expand(kv, n_heads, how="interleave"):
    """(B, n_kv_heads, L, d_head) -> (B, n_heads, L, d_head)."""
    group = n_heads // kv.shape[1]
    return kv.repeat_interleave(group, dim=1) if how == "interleave" else kv.repeat(1, group, 1, 1)


# Which keys token i may see (True), for each wrong mask: (L, L) -> bool.
MASKS = {
    "causal": lambda ones: ones.tril(),           # keys 0..i
    "none": lambda ones: ones,                    # every key
    "inverted": lambda ones: ~ones.tril(),        # keys i+1..L-1 (the last token sees none)
    "future": lambda ones: ones.triu(),           # keys i..L-1
    "no-diagonal": lambda ones: ones.tril(-1),    # keys 0..i-1 (the first token sees none)
    "one-ahead": lambda ones: ones.tril(1),       # keys 0..i+1
}


def prefill(x, w_q, w_k, w_v, w_o, n_heads, *, mask="causal", fill="-inf", how="fill", expand_how="interleave",
            split_order="right", merge_order="right", scale=None, scale_after=False, softmax_dim=-1):
    """The prefill with one knob turned: (y, k_cache, v_cache, out) in float64, out the per-head
    attention output (B, n_heads, L, d_head).

    mask: a key of MASKS; fill: "-inf" or "min" (masked_fill with the dtype's lowest finite value,
    like -1e9: a token that sees no key then averages every value); how: "fill" (masked_fill
    before the softmax), "zero_after" (the weights of hidden keys zeroed after the softmax, not
    renormalised) or "multiply" (the scores multiplied by the 0/1 mask).
    """
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv_heads = w_k.shape[1] // d_head
    q = split(x @ w_q, n_heads, split_order)                             # (B, n_heads, L, d_head)
    k = split(x @ w_k, n_kv_heads, split_order)                          # (B, n_kv_heads, L, d_head)
    v = split(x @ w_v, n_kv_heads, split_order)
    s = 1 / math.sqrt(d_head) if scale is None else scale
    scores = q @ expand(k, n_heads, expand_how).transpose(-2, -1) * (1.0 if scale_after else s)  # (B, H, L, L)
    allowed = MASKS[mask](torch.ones(L, L, dtype=torch.bool))            # (L, L)
    if how == "fill":
        scores = scores.masked_fill(~allowed, float("-inf") if fill == "-inf" else torch.finfo(scores.dtype).min)
    elif how == "multiply":
        scores = scores * allowed.to(scores.dtype)
    weights = torch.softmax(scores, dim=softmax_dim) * (s if scale_after else 1.0)   # (B, H, L, L)
    if how == "zero_after":
        weights = weights * allowed.to(weights.dtype)
    out = weights @ expand(v, n_heads, expand_how)                       # (B, n_heads, L, d_head)
    y = merge(out, merge_order) @ w_o                                    # (B, L, d_model)
    return y, k, v, out


def _y_candidates(n_heads: int, n_kv_heads: int, d_head: int, d_model: int) -> list[tuple[str, str, str, dict]]:
    """(name, sentence, fix, knobs) for the wrong y's, most common first."""
    cands = [
        ("no-causal-mask", "your y equals attention with no causal mask: every token sees the whole prompt",
         "hide the later tokens: scores.masked_fill(~torch.ones(L, L, dtype=torch.bool, device=x.device).tril(), "
         "float('-inf')) before the softmax", dict(mask="none")),
        ("causal-future-visible", "your y equals attention in which token i sees tokens i..L-1 (an upper-triangular "
         "mask, triu)", "token i may see tokens 0..i: keep the lower triangle, tril", dict(mask="future")),
        ("causal-no-diagonal", "your y equals attention in which token i sees tokens 0..i-1, not itself (tril(-1), or "
         "a strict comparison), so the first token sees nothing", "a token may attend to itself: keep the diagonal, "
         "tril() (or key position <= query position)", dict(mask="no-diagonal")),
        ("causal-no-diagonal", "your y equals attention in which token i sees tokens 0..i-1, not itself (tril(-1), or "
         "a strict comparison; filled with a finite value, the first token averages every value)",
         "a token may attend to itself: keep the diagonal, tril() (or key position <= query position)",
         dict(mask="no-diagonal", fill="min")),
        ("causal-one-ahead", "your y equals attention in which token i also sees token i+1 (tril(1), an off-by-one)",
         "token i sees tokens 0..i: tril() with no diagonal offset", dict(mask="one-ahead")),
        ("causal-inverted", "your y equals attention with the causal mask inverted: token i sees only the tokens "
         "after it", "the lower triangle (tril) is what each token may see, so fill the other positions: "
         "masked_fill(~mask, float('-inf'))", dict(mask="inverted")),
        ("causal-inverted", "your y equals attention with the causal mask inverted (filled with a finite value): "
         "token i sees only the tokens after it", "the lower triangle (tril) is what each token may see, so fill "
         "the other positions: masked_fill(~mask, ...)", dict(mask="inverted", fill="min")),
        ("causal-mask-after-softmax", "your y equals attention whose weights for later tokens were zeroed after the "
         "softmax, so the rows no longer sum to 1", "mask the scores with -inf before the softmax",
         dict(how="zero_after")),
        ("causal-mask-multiplied", "your y equals attention with the scores multiplied by the 0/1 causal mask",
         "a score of 0 still gets weight: fill the hidden scores with -inf", dict(how="multiply")),
    ]
    if 1 < n_kv_heads < n_heads:
        cands.append(("gqa-repeat", "your y equals grouped-query attention with the KV heads tiled (repeat) instead "
                      "of grouped", "query head h reads KV head h // (n_heads // n_kv_heads), which is what "
                      "repeat_interleave(n_heads // n_kv_heads, dim=1) gives", dict(expand_how="repeat")))
    cands += [
        ("heads-split-without-transpose", "your y equals attention with the projections reshaped straight to "
         "(B, n_heads, L, d_head), which mixes the tokens' features", "reshape to (B, L, n_heads, d_head) first, "
         "then transpose(1, 2)", dict(split_order="no-transpose")),
        ("heads-merged-without-transpose", "your y equals attention whose heads were merged with a plain reshape "
         "of (B, n_heads, L, d_head) to (B, L, n_heads * d_head)", "transpose(1, 2) back to (B, L, n_heads, "
         "d_head) before the reshape", dict(merge_order="no-transpose")),
        ("heads-split-wrong-order", "your y equals attention with the projections split into heads as "
         "(B, L, d_head, n_heads)", "the columns are grouped head by head, so reshape to (B, L, n_heads, d_head)",
         dict(split_order="wrong")),
        ("heads-split-and-merged-wrong-order", "your y equals attention with heads split as (B, L, d_head, n_heads) "
         "and merged back the same way", "the columns are grouped head by head: split to (B, L, n_heads, d_head) "
         "and merge back the same way", dict(split_order="wrong", merge_order="wrong")),
        ("heads-merged-wrong-order", "your y equals attention whose heads are merged as (B, L, d_head, n_heads)",
         "merge (B, L, n_heads, d_head) with a plain reshape to (B, L, n_heads * d_head)",
         dict(merge_order="wrong")),
        ("no-scale", "your y equals attention without the 1/sqrt(d_head) scale",
         "divide the scores by math.sqrt(d_head)", dict(scale=1.0)),
        ("scale-1/sqrt(d_model)", "your y equals attention scaled by 1/sqrt(d_model)",
         "the scale uses the width of one head, d_head = w_q.shape[1] // n_heads", dict(scale=1 / math.sqrt(d_model))),
        ("scale-1/d_head", "your y equals attention scaled by 1/d_head", "the scale is 1/sqrt(d_head), a square root",
         dict(scale=1 / d_head)),
        ("scale-after-softmax", "your y equals attention scaled by 1/sqrt(d_head) after the softmax, so the weights "
         "of each token sum to 1/sqrt(d_head), not 1", "scale the scores before the softmax: "
         "softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head))", dict(scale_after=True)),
        ("softmax-over-queries", "your y equals attention normalised over the queries (dim=-2) instead of the keys",
         "softmax over the last axis, the keys: dim=-1", dict(softmax_dim=-2)),
    ]
    if n_heads > 1:
        cands += [
            ("softmax-over-heads", "your y equals a softmax over the heads axis (dim=1)",
             "normalise over the keys, dim=-1", dict(softmax_dim=1)),
            ("softmax-over-heads", "your y equals a softmax over the heads axis (dim=1; hidden scores filled with a "
             "finite value)", "normalise over the keys, dim=-1", dict(softmax_dim=1, fill="min")),
        ]
    return cands


def prefill_variants(x, w_q, w_k, w_v, w_o, n_heads, *, which: int = Y, positions=None) -> list[Variant]:
    """Wrong answers for y (which=0), the returned k_cache (1) or v_cache (2), most common first.

    ``positions``: a slice of the token axis to keep (y[:, positions], caches[:, :, positions]).
    """
    args = (x, w_q, w_k, w_v, w_o, n_heads)
    d_head = w_q.shape[1] // n_heads
    n_kv_heads, d_model = w_k.shape[1] // d_head, x.shape[-1]
    keep = slice(None) if positions is None else positions

    def part(t, axis):
        return t[:, keep] if axis == 1 else t[:, :, keep]

    if which == Y:
        return distinct([Variant(name, sentence, part(prefill(*args, **knobs)[Y], 1), fix)
                         for name, sentence, fix, knobs in _y_candidates(n_heads, n_kv_heads, d_head, d_model)])
    name = "k_cache" if which == K_CACHE else "v_cache"
    other = V_CACHE if which == K_CACHE else K_CACHE
    ref_y, ref_k, ref_v, out = prefill(*args)
    cands = [
        ("caches-swapped", f"your {name} holds the other cache's values", (ref_k, ref_v)[other - 1],
         "return (y, k_cache, v_cache) in that order, keys from w_k and values from w_v"),
        ("cache-split-wrong-order", f"your {name} is split into heads as (B, L, d_head, n_kv_heads)",
         prefill(*args, split_order="wrong")[which],
         "the projection's columns are grouped head by head, so reshape to (B, L, n_kv_heads, d_head), "
         "then transpose(1, 2)"),
        ("cache-split-without-transpose", f"your {name} is the projection reshaped straight to "
         "(B, n_kv_heads, L, d_head), which mixes the tokens' features",
         prefill(*args, split_order="no-transpose")[which],
         "reshape to (B, L, n_kv_heads, d_head) first, then transpose(1, 2)"),
    ]
    if which == K_CACHE:
        cands.append(("cache-keys-scaled", "your k_cache holds the keys already divided by sqrt(d_head)",
                      ref_k / math.sqrt(d_head), "scale the scores, not the stored keys: decode_step scales "
                      "again when it reads the cache"))
    if n_kv_heads == n_heads:   # otherwise these have n_heads heads: a shape, named by the suite
        q = split(x @ w_q, n_heads)                                      # (B, n_heads, L, d_head)
        cands.append(("cache-from-query", f"your {name} holds the queries (x @ w_q), not the keys",
                      q, "the caches keep x @ w_k and x @ w_v, split into KV heads"))
        cands.append(("cache-after-attention", f"your {name} holds the attention output of each head",
                      out, "the caches keep every token's key and value before attention: x @ w_k and x @ w_v, "
                      "split into KV heads"))
    return distinct([Variant(n, sentence, part(value, 2), fix) for n, sentence, value, fix in cands])


def distinct(variants: list[Variant]) -> list[Variant]:
    """The variants that give an answer of their own on these inputs. On a short prompt some
    mistakes coincide exactly (with L = 1, a mask without the diagonal and an inverted one both
    hide the only token): a value two names share names neither, and a name's second version of
    the same value is dropped."""
    tol = MATCH_TOLERANCE_FLOAT64

    def same(a: Variant, b: Variant) -> bool:
        return a.value.shape == b.value.shape and torch.allclose(a.value, b.value, rtol=tol.rtol, atol=tol.atol,
                                                                 equal_nan=True)

    pairs = [(u, v) for i, v in enumerate(variants) for u in variants[:i] if same(u, v)]
    shared = {x.name for u, v in pairs if u.name != v.name for x in (u, v)}
    repeated = {id(v) for u, v in pairs if u.name == v.name}
    return [v for v in variants if v.name not in shared and id(v) not in repeated]


# Every mistake this suite names, by id. Value ids come from the variants above (matched on values);
# the others from the check that catches them.
CATALOGUE = {
    "no-causal-mask": "no causal mask: every token sees the whole prompt",
    "causal-future-visible": "an upper-triangular causal mask: token i sees i..L-1",
    "causal-no-diagonal": "the causal mask hides the diagonal: a token cannot see itself",
    "causal-one-ahead": "the causal mask is off by one: token i also sees token i+1",
    "causal-inverted": "the causal mask inverted: token i sees only the later tokens",
    "causal-mask-after-softmax": "the causal mask applied after the softmax by zeroing weights",
    "causal-mask-multiplied": "the scores multiplied by the 0/1 causal mask",
    "gqa-repeat": "GQA heads expanded with repeat instead of repeat_interleave",
    "heads-split-without-transpose": "projections reshaped to (B, n_heads, L, d_head) without a transpose",
    "heads-merged-without-transpose": "heads merged by reshaping (B, n_heads, L, d_head) without a transpose",
    "heads-split-wrong-order": "projections split into heads in the wrong order",
    "heads-split-and-merged-wrong-order": "heads split and merged in the wrong order",
    "heads-merged-wrong-order": "heads merged in the wrong order",
    "no-scale": "no 1/sqrt(d_head) scale",
    "scale-1/sqrt(d_model)": "scaled by the model width",
    "scale-1/d_head": "scores divided by d_head instead of sqrt(d_head)",
    "scale-after-softmax": "the 1/sqrt(d_head) scale applied after the softmax",
    "softmax-over-queries": "softmax over the queries (dim=-2)",
    "softmax-over-heads": "softmax over the heads axis",
    "caches-swapped": "k_cache and v_cache returned in each other's place",
    "cache-split-wrong-order": "the caches split into heads in the wrong order",
    "cache-split-without-transpose": "the caches reshaped to (B, n_kv_heads, L, d_head) without a transpose",
    "cache-keys-scaled": "the keys stored already divided by sqrt(d_head)",
    "cache-from-query": "the caches hold the query projection",
    "cache-after-attention": "the caches hold the attention output instead of the keys and values",
    # the generic ones this suite can reach (it returns no bool and takes no gradient)
    **{k: v for k, v in GENERIC_MISCONCEPTIONS.items() if k not in ("not-bool", "no-gradient", "gradient-mismatch")},
    "projection-transposed": "projected with F.linear(x, W) or x @ W.T instead of x @ W: an exception",
    "fixed-axes-transposed": "the keys transposed on other axes than the last two (k.T on a 4-D tensor): an exception",
    "no-output-projection": "the output projection w_o is missing",
    "heads-not-merged": "y returned per head, (B, n_heads, L, d_head)",
    "last-position-only": "y returned for the last token only, (B, d_model)",
    "cache-time-major": "the caches returned as (B, L, n_kv_heads, d_head), before the transpose",
    "cache-not-split": "the caches returned as the projections (B, L, n_kv_heads * d_head)",
    "cache-expanded": "the caches stored expanded to n_heads",
    "inputs-modified": "an input (x or a weight) modified in place",
    "future-leak": "an earlier output changes when a later token changes",
}
