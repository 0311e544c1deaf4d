"""Known wrong versions of exercise 11, computed in float64 on the test's own inputs.

Each variant is the reference with exactly one knob turned (``quantize`` for the codes and scales,
``attend`` for the attention output). When a learner's values differ from the reference, the suite
compares them with every variant and names the first one they equal.

Codes are integers, compared exactly (float32 and float64 inputs). A variant's codes are exact too,
except where its own value before rounding sits on a rounding boundary: the reference's inputs keep
every x / scale at least 1e-3 from a half-integer, but a floored or truncated code flips at the
integers, and the absmax element of a row is x / scale = +-127 up to rounding. There the learner's
code may honestly land on either side, so ``settle`` takes the learner's own code (when it is one
of the two neighbours) and the variant is still matched exactly everywhere else.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant

NEAR_BOUNDARY = 1e-3     # a value this close to a rounding boundary may round either way in float32


def quantize(x, *, over="token", divisor=127.0, rounding="half-even", cast_only=False):
    """x (..., d) float64 -> (codes (..., d) float64, scale (..., 1), r (..., d) the value rounded,
    boundary: the distance of r from its rounding boundary).

    over: "token" (the last axis: right), "head" (the last two axes: every token of a head shares
    one scale) or "tensor" (one scale for everything); divisor: 127 (right) or 128; rounding:
    "half-even" (torch.round: right), "floor" or "trunc" (a bare .to(torch.int8)); cast_only: the
    codes are x itself cast to int8, without dividing by the scale.
    """
    x = x.to(torch.float64)
    if over == "token":
        amax = x.abs().amax(dim=-1, keepdim=True)                               # (..., 1)
    elif over == "head":
        amax = x.abs().amax(dim=(-2, -1), keepdim=True).expand(*x.shape[:-1], 1)   # (..., T, 1), shared
    else:
        amax = x.abs().amax().expand(*x.shape[:-1], 1)                           # (..., 1), one value
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / divisor)       # (..., 1)
    r = x if cast_only else x / scale                                           # (..., d)
    if rounding == "half-even":
        codes, frac = torch.round(r), (r - r.floor() - 0.5).abs()               # boundaries at half-integers
    else:
        codes = r.floor() if rounding == "floor" else r.trunc()
        frac = torch.minimum(r - r.floor(), r.ceil() - r)                        # boundaries at integers
        frac = torch.where(r == r.round(), torch.zeros_like(r), frac)
    return codes.clamp(-127, 127), scale, r, frac


def settle(codes: torch.Tensor, near: torch.Tensor, got) -> torch.Tensor:
    """``codes`` with the learner's own code where the variant's value sits within NEAR_BOUNDARY of a
    rounding boundary and the learner's code is one of the two it may round to."""
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(codes.shape):
        return codes
    g = got.detach().to("cpu", torch.float64)
    either = (near < NEAR_BOUNDARY) & ((g - codes).abs() <= 1)
    return torch.where(either, g, codes)


# The mistakes of quantize_kv, as knobs of quantize: (id, sentence, fix, knobs).
QUANT_CANDIDATES = [
    ("scale-per-tensor", "{what} equals quantization with one scale for the whole tensor",
     "take the absmax of each row on its own: x.abs().amax(dim=-1, keepdim=True)", dict(over="tensor")),
    ("scale-per-head", "{what} equals quantization with one scale per head, shared by all its tokens",
     "one scale per token and head: the absmax over the last axis only, amax(dim=-1, keepdim=True)",
     dict(over="head")),
    ("divide-by-128", "{what} equals quantization with scale = amax / 128",
     "int8 runs from -128 to 127, but a symmetric code uses -127..127: scale = amax / 127, so the largest "
     "|x| of a row becomes exactly +-127", dict(divisor=128.0)),
    ("codes-floored", "{what} equals codes rounded down (floor) instead of to the nearest integer",
     "round to nearest with torch.round(x / scale) before the cast", dict(rounding="floor")),
    ("codes-truncated", "{what} equals codes truncated toward zero (a bare .to(torch.int8) on x / scale)",
     "a cast to int8 truncates: round first, torch.round(x / scale), then clamp and cast", dict(rounding="trunc")),
]

# The mistakes of the new token's codes in a decode step (the old ones are carried as they are).
NEW_CANDIDATES = [c for c in QUANT_CANDIDATES if c[0] not in ("scale-per-tensor", "scale-per-head")] + [
    ("new-token-cast-without-scale", "{what} holds the new token's key or value cast to int8 as it is, without "
     "dividing by its scale", "quantize the new entry like any other: codes = round(x / scale), with "
     "scale = amax(|x|) / 127 over its last axis", dict(cast_only=True, rounding="trunc")),
]


def code_variants(x, got=None, *, which: str = "codes", what: str = "your x_q", candidates=None) -> list[Variant]:
    """Wrong codes (which="codes") or scales ("scale") of quantize_kv(x), float64."""
    found = []
    for ident, sentence, fix, knobs in candidates or QUANT_CANDIDATES:
        if which == "scale" and knobs.get("cast_only"):
            continue
        codes, scale, _, near = quantize(x, **knobs)
        value = settle(codes, near, got) if which == "codes" else scale
        found.append(Variant(ident, sentence.format(what=what), value, fix))
    return found


def cache_variants(old, x_new, got=None, *, which: str = "codes", what: str = "your k_q") -> list[Variant]:
    """Wrong grown caches: ``old`` (B, H_kv, T, d) codes or (B, H_kv, T, 1) scales, float64, with the
    new token's entry (quantized from x_new (B, H_kv, d) with one mistake) appended."""
    found = []
    got_new = got[:, :, -1] if isinstance(got, torch.Tensor) and got.dim() == 4 and got.shape[2] > 0 else None
    for v in code_variants(x_new, got_new, which=which, what=what, candidates=NEW_CANDIDATES):
        grown = torch.cat([old.to(torch.float64), v.value[:, :, None, :]], dim=2)
        found.append(Variant(v.name, v.sentence, grown, v.fix))
    return found


def attend(q_t, k_q, k_scale, v_q, v_scale, **knobs):
    """out_t (B, H, d) in float64 from the grown caches (codes and scales as given), one knob turned
    (:func:`operands`)."""
    return attention(*operands(q_t, k_q, k_scale, v_q, v_scale, **knobs))


def attention(q, k, v):
    """softmax(q k^T / sqrt(d)) v for one query per head: q (B, H, d), k and v (B, H, T + 1, d)."""
    scores = (q[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])      # (B, H, 1, T + 1)
    return (torch.softmax(scores, dim=-1) @ v)[:, :, 0, :]                           # (B, H, d)


def operands(q_t, k_q, k_scale, v_q, v_scale, *, k_scaled=True, v_scaled=True, quantize_query=False,
             expand="interleave", new_raw=None):
    """What out_t attends with, in float64, one knob turned: q (B, H, d), and k and v (B, H, T + 1, d)
    dequantized (or not) from the grown caches, KV heads expanded to the query heads.
    new_raw: (k_t, v_t), attended in place of the new token's dequantized entries."""
    q = q_t.to(torch.float64)
    if quantize_query:
        codes, scale, _, _ = quantize(q)
        q = codes * scale                                                      # (B, H, d)
    k = k_q.to(torch.float64) * (k_scale.to(torch.float64) if k_scaled else 1.0)   # (B, H_kv, T + 1, d)
    v = v_q.to(torch.float64) * (v_scale.to(torch.float64) if v_scaled else 1.0)
    if new_raw is not None:                                                    # the last slot is the new token
        k, v = k.clone(), v.clone()
        k[:, :, -1], v[:, :, -1] = (t.to(torch.float64) for t in new_raw)
    group = q.shape[1] // k.shape[1]
    if expand == "interleave":
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)   # (B, H, T + 1, d)
    else:
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    return q, k, v


OUT_CANDIDATES = [
    ("dequant-without-scale", "your out_t equals attention over the raw int8 codes, never multiplied by their "
     "scales", "dequantize first: k = k_q.to(q_t.dtype) * k_scale, and the same for v", dict(k_scaled=False,
                                                                                           v_scaled=False)),
    ("dequant-without-scale", "your out_t equals attention whose keys are the raw int8 codes, never multiplied "
     "by k_scale", "dequantize the keys too: k = k_q.to(q_t.dtype) * k_scale", dict(k_scaled=False)),
    ("dequant-without-scale", "your out_t equals attention whose values are the raw int8 codes, never "
     "multiplied by v_scale", "dequantize the values too: v = v_q.to(q_t.dtype) * v_scale", dict(v_scaled=False)),
    ("query-quantized", "your out_t equals attention with the query quantized to int8 and back as well",
     "only the cache is stored in int8; the query is used once and stays in full precision", dict(quantize_query=True)),
    ("new-token-attended-raw", "your out_t equals attention over the cached tokens dequantized but the new "
     "token's raw k_t and v_t, not the int8 entries you appended for it",
     "attend over the grown caches only, the new token's entries dequantized like the others: the next step "
     "will only have those", dict(new_raw=True)),
    ("gqa-repeat", "your out_t equals grouped-query attention with the KV heads tiled (repeat) instead of grouped",
     "query head h reads KV head h // (H // H_kv): repeat_interleave(H // H_kv, dim=1), not repeat",
     dict(expand="repeat")),
]


def rounding_slack(q_t, k, v, dtype: torch.dtype) -> torch.Tensor:
    """How far attention of ``q_t`` over ``k`` and ``v`` (float64, as :func:`operands` gives them),
    computed in ``dtype``, can lie from its float64 value: (B, H, d).

    First-order bound, with u the dtype's unit roundoff: each score q . k_j / sqrt(d) is off by at most
    (d + 2) u max_j(|q| . |k_j|) / sqrt(d) =: e; a softmax whose scores move by at most e moves its
    output by at most 2 e sum_j w_j |v_j - out|; the weighted sum adds a few u max|v|. Where one key
    takes all the weight (sum_j w_j |v_j - out| ~ 0) nothing is allowed beyond the tolerance; where
    two keys nearly tie, the output may honestly land anywhere between their values
    (docs/tolerances.md, "Ill-conditioned wrong answers")."""
    u = torch.finfo(dtype).eps / 2
    d = q_t.shape[-1]
    scores = (q_t[:, :, None, :] @ k.transpose(-2, -1))[:, :, 0] / math.sqrt(d)                 # (B, H, T + 1)
    sizes = (q_t.abs()[:, :, None, :] @ k.abs().transpose(-2, -1))[:, :, 0] / math.sqrt(d)      # (B, H, T + 1)
    w = torch.softmax(scores, dim=-1)                                                           # (B, H, T + 1)
    out = (w[..., None] * v).sum(-2)                                                            # (B, H, d)
    spread = (w[..., None] * (v - out[:, :, None, :]).abs()).sum(-2)                            # (B, H, d)
    e = (d + 2) * u * sizes.amax(-1, keepdim=True)                                              # (B, H, 1)
    return 2 * e * spread + 4 * u * v.abs().amax(-2)


def out_variants(q_t, k_q, k_scale, v_q, v_scale, new=None, *, dtype: torch.dtype = torch.float32) -> list[Variant]:
    """Wrong out_t, computed from the caches the learner returned (so a quantization mistake, already
    charged to the caches, is not charged here again); ``new``: the step's (k_t, v_t); ``dtype``: the
    dtype the learner computed in.

    Attention over raw codes has scores in the hundreds: a hundred times the rounding the dtype's
    tolerance is made for, and near-ties between keys turn it into output differences far above that
    tolerance (float32 code missed it at 31 of 100 seeds). Those variants carry their rounding bound
    (:func:`rounding_slack`); the others have scores of order 1, which the tolerance covers."""
    H, H_kv = q_t.shape[1], k_q.shape[1]
    found = []
    for ident, sentence, fix, knobs in OUT_CANDIDATES:
        if (ident == "gqa-repeat" and not 1 < H_kv < H) or (ident == "new-token-attended-raw" and new is None):
            continue
        knobs = dict(knobs, new_raw=new) if "new_raw" in knobs else knobs
        q, k, v = operands(q_t, k_q, k_scale, v_q, v_scale, **knobs)
        raw_codes = knobs.get("k_scaled") is False or knobs.get("v_scaled") is False
        found.append(Variant(ident, sentence, attention(q, k, v), fix, rounding_slack(q, k, v, dtype) if raw_codes else 0.0))
    return found


# Every mistake this suite names, by id, with the sentence shown to the learner. Value ids come from
# the variants above (matched on values); the others from the check that catches them.
CATALOGUE: dict[str, str] = {
    # quantizing
    "scale-per-tensor": "one scale for the whole tensor instead of one per token and head",
    "scale-per-head": "one scale per head, shared by all its tokens, instead of one per token",
    "scale-squeezed": "the scale returned without its last axis of size 1: (...,) instead of (..., 1)",
    "divide-by-128": "scale = amax / 128 instead of amax / 127",
    "codes-floored": "codes rounded down (floor) instead of to the nearest integer",
    "codes-truncated": "codes truncated toward zero (a bare cast to int8) instead of rounded",
    "zero-row-scale": "a row of zeros gets a scale of 0 (or a tiny one) instead of 1",
    "codes-not-int8": "the codes returned as floating-point numbers instead of int8",
    "input-modified": "the caller's tensor divided (or changed) in place",
    # the decode step
    "new-token-stored-raw": "the new token's key or value appended unquantized, its raw values in the cache",
    "new-token-cast-without-scale": "the new token's key or value cast to int8 without dividing by its scale",
    "dequant-without-scale": "attention over the raw int8 codes, never multiplied by their scales",
    "query-quantized": "the query quantized to int8 and back too",
    "new-token-attended-raw": "the new token attended with its raw k_t and v_t instead of its int8 entries",
    "gqa-repeat": "GQA heads expanded with repeat instead of repeat_interleave",
    **GENERIC_MISCONCEPTIONS,
}
