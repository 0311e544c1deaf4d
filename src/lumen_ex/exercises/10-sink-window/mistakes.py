"""Known wrong versions of exercise 10, computed in float64 on the same inputs as the reference.

When a learner's results differ from the reference, the suite compares them with each variant here
and names the first one that matches. Every variant is one streaming decode step with exactly one
thing done differently (:func:`step`, one keyword knob): where the new token is stored, which slots
the query reads and when, or how the attention over them is computed. :func:`stream` runs a whole
sequence through a variant, feeding its own caches back, as a learner's code would run.

The hidden inputs (src/lumen_ex/exercises/10-sink-window/suite/cases.py) keep the variants apart:
n_sink is not a multiple of window, the step tests sit at phases where each wrong slot is another
slot, and every axis has its own size. A variant that gives the reference's answer on an input is
left out there by the harness (it cannot be told apart, and it is not wrong there).
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant

OUT_T, K_CACHE, V_CACHE = 0, 1, 2


def write_slot(n_seen: int, n_sink: int, window: int, how: str) -> int:
    """The slot the new token is stored in: "right"; "mod-C" (one ring over the whole cache, sinks
    included); "from-token-0" (the ring position counted from token 0, n_sink + t % window). The
    wrong ones differ only once the cache is full: while it fills, token t goes to slot t."""
    C = n_sink + window
    if n_seen < C or how == "right":
        return n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    if how == "mod-C":
        return n_seen % C
    if how == "from-token-0":
        return n_sink + n_seen % window
    raise ValueError(how)


def step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window, *, write="right", layout="ring",
         read="right", expand="interleave", scale=None, softmax_dim=-1):
    """One streaming step with one knob turned: (out_t, k_cache, v_cache) in float64, new tensors.

    write: the slot rule once the cache is full (:func:`write_slot`), or "none" (the caches come back
    as they were given). layout="shift": once full, keep the sinks and slide the window left by one,
    the new token last (a queue instead of a ring).
    read: "right" (the occupied slots after the write), "stale" (the same slots, read from the caches
    as they were before the write), "all" (every slot, empty ones included) or "old+new" (the slots
    occupied before the write and the new token besides: C + 1 keys once full).
    """
    q_t, k_t, v_t, k_old, v_old = (x.to(torch.float64) for x in (q_t, k_t, v_t, k_cache, v_cache))
    C = n_sink + window
    k_new, v_new = k_old.clone(), v_old.clone()
    if layout == "shift" and n_seen >= C:
        keep = [*range(n_sink), *range(n_sink + 1, C)]
        k_new = torch.cat([k_old[:, :, keep], k_t[:, :, None]], dim=2)          # (B, H_kv, C, d)
        v_new = torch.cat([v_old[:, :, keep], v_t[:, :, None]], dim=2)
    elif write != "none":
        slot = write_slot(n_seen, n_sink, window, write)
        k_new[:, :, slot], v_new[:, :, slot] = k_t, v_t
    n_occ = min(n_seen + 1, C)
    if read == "stale":
        k, v = k_old[:, :, :n_occ], v_old[:, :, :n_occ]
    elif read == "all":
        k, v = k_new, v_new
    elif read == "old+new":
        old = min(n_seen, C)
        k = torch.cat([k_old[:, :, :old], k_t[:, :, None]], dim=2)               # (B, H_kv, old + 1, d)
        v = torch.cat([v_old[:, :, :old], v_t[:, :, None]], dim=2)
    else:
        k, v = k_new[:, :, :n_occ], v_new[:, :, :n_occ]
    group = q_t.shape[1] // k.shape[1]
    if expand == "interleave":
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)   # (B, H, n, d)
    else:
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    s = 1 / math.sqrt(q_t.shape[-1]) if scale is None else scale
    scores = (q_t[:, :, None, :] @ k.transpose(-2, -1)) * s                     # (B, H, 1, n)
    out = (torch.softmax(scores, dim=softmax_dim) @ v)[:, :, 0, :]               # (B, H, d)
    return out, k_new, v_new


def stream(qs, ks, vs, n_sink, window, **knobs):
    """Decode a whole sequence from empty (zero) caches with one knob turned, each step's caches fed
    to the next: qs (B, H, L, d), ks and vs (B, H_kv, L, d) -> the outputs (B, H, L, d)."""
    B, H_kv, L, d = ks.shape
    k_cache = torch.zeros(B, H_kv, n_sink + window, d, dtype=torch.float64)
    v_cache = torch.zeros_like(k_cache)
    outs = []
    for t in range(L):
        out, k_cache, v_cache = step(qs[:, :, t], ks[:, :, t], vs[:, :, t], k_cache, v_cache, t, n_sink, window,
                                     **knobs)
        outs.append(out)
    return torch.stack(outs, dim=2)


# The mistakes of out_t: (id, sentence, fix, knobs). The cache's own come first: they are what this
# exercise is about.
OUT_CANDIDATES = [
    ("written-after-attending", "your out_t equals attention over the slots read before the new token was "
     "written, so its slot still held what was there before (zeros while the cache fills, the evicted token "
     "after)", "store k_t and v_t in their slot first and attend after, so that the new token sees itself",
     dict(read="stale")),
    ("empty-slots-attended", "your out_t equals attention over all C slots, the empty (zero) ones included",
     "while the cache fills only slots 0..n_seen are occupied, so attend to k_cache[:, :, :min(n_seen + 1, C)] "
     "(a zero key still gets weight exp(0) in the softmax)", dict(read="all")),
    ("window-without-new-token", "your out_t equals attention over the cache as it was (sinks and the last "
     "window earlier tokens) plus the new token, C + 1 keys with the evicted token still seen",
     "the window counts the new token, so evict first (overwrite the oldest window slot with the new token) and "
     "then attend to exactly the C slots", dict(read="old+new")),
    ("sinks-evicted", "your out_t equals attention after storing the new token at slot n_seen % C, a ring over "
     "the whole cache that overwrites the sinks in turn", "the first n_sink slots are never evicted, so token t goes "
     "to slot n_sink + (t - n_sink) % window", dict(write="mod-C")),
    ("ring-index-off-by-n-sink", "your out_t equals attention after storing the new token at slot "
     "n_sink + n_seen % window, its ring position counted from token 0, not from token n_sink",
     "token t's place in the ring is (t - n_sink) % window, so its slot is n_sink + (t - n_sink) % window",
     dict(write="from-token-0")),
    ("window-shifted", "your out_t equals attention after dropping the token in the first window slot and "
     "shifting the window left like a queue, although the slot after the sinks does not hold the oldest token here",
     "the window is a ring, so overwrite only slot n_sink + (n_seen - n_sink) % window, where the oldest token is, "
     "and move nothing", dict(layout="shift")),
    ("gqa-repeat", "your out_t equals grouped-query attention with the KV heads tiled (repeat) instead of grouped",
     "query head h reads KV head h // (H // H_kv), which is what repeat_interleave(H // H_kv, dim=1) gives",
     dict(expand="repeat")),
    ("no-scale", "your out_t equals attention without the 1/sqrt(d) scale", "divide the scores by math.sqrt(d)",
     dict(scale=1.0)),
]

# The mistakes of the returned caches (which=K_CACHE or V_CACHE): (id, sentence, fix, knobs).
CACHE_CANDIDATES = [
    ("sinks-evicted", "your {name} has the new token at slot n_seen % C, a ring over the whole cache that "
     "overwrites a sink", "the first n_sink slots are never evicted, so token t goes to slot "
     "n_sink + (t - n_sink) % window", dict(write="mod-C")),
    ("ring-index-off-by-n-sink", "your {name} has the new token at slot n_sink + n_seen % window, its ring "
     "position counted from token 0, not from token n_sink", "token t's place in the ring is "
     "(t - n_sink) % window, so its slot is n_sink + (t - n_sink) % window", dict(write="from-token-0")),
    ("window-shifted", "your {name} keeps the sinks and shifts the window left by one slot, the new token last "
     "(a queue, not a ring)", "the window is a ring, so write the new token over slot "
     "n_sink + (n_seen - n_sink) % window and leave every other slot where it is", dict(layout="shift")),
    ("cache-not-written", "your {name} is the cache you were given, without the new token",
     "store k_t and v_t in a copy of the caches (k_cache.clone()) at the new token's slot, and return that copy",
     dict(write="none")),
]


def step_variants(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window, *, which: int = OUT_T,
                  occupied: bool = True) -> list[Variant]:
    """Wrong answers for out_t (which=0), the returned k_cache (1) or v_cache (2). ``occupied``: the
    caches' variants cut to the occupied slots, as the suite grades them."""
    args = (q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window)
    H, H_kv = q_t.shape[1], k_cache.shape[1]
    n_occ = min(n_seen + 1, n_sink + window)
    if which == OUT_T:
        found = []
        for ident, sentence, fix, knobs in OUT_CANDIDATES:
            if ident == "gqa-repeat" and not 1 < H_kv < H:
                continue
            found.append(Variant(ident, sentence, step(*args, **knobs)[OUT_T], fix))
        return found
    name = "k_cache" if which == K_CACHE else "v_cache"
    found = []
    for ident, sentence, fix, knobs in CACHE_CANDIDATES:
        value = step(*args, **knobs)[which]
        found.append(Variant(ident, sentence.format(name=name), value[:, :, :n_occ] if occupied else value, fix))
    return found


# What a whole decoding run shows of each mistake of the cache (the others cannot show in it).
STREAM_SENTENCES = {
    "written-after-attending": "at every step your query attends to the slots as they were before the new token "
                               "was written, so it never sees itself",
    "empty-slots-attended": "at every step your query attends to all C slots, the empty (zero) ones included "
                            "while the cache fills",
    "window-without-new-token": "at every step your query attends to the cache as it came plus the new token, "
                                "C + 1 tokens once the cache is full",
    "sinks-evicted": "your decoding stores token t at slot t % C, a ring over the whole cache that overwrites the "
                     "sinks, which leaves a plain sliding window of the last C tokens",
    "ring-index-off-by-n-sink": "your decoding stores token t at slot n_sink + t % window once the cache is full, "
                                "its ring position counted from token 0, so it overwrites a token still in the "
                                "window and keeps an older one",
    "window-shifted": "your decoding shifts the window left like a queue",
}


def stream_variants(qs, ks, vs, n_sink, window, weights_of) -> list[Variant]:
    """Wrong answers for a whole sequence's outputs, as ``weights_of(outputs)`` turns them into what
    the suite compares (the attention weights, read off one-hot values)."""
    found = []
    for ident, _, fix, knobs in OUT_CANDIDATES:
        sentence = STREAM_SENTENCES.get(ident)
        if sentence is None:
            continue                      # the arithmetic mistakes: the probe's zero queries cannot show them
        found.append(Variant(ident, sentence, weights_of(stream(qs, ks, vs, n_sink, window, **knobs)), fix))
    return found


def read_from(name: str) -> dict:
    """The knobs of a named mistake (for the pictures), or {}."""
    return next((k for ident, _, _, k in OUT_CANDIDATES if ident == name), {})


# Every mistake this suite names, by id, with the sentence shown to the learner. Value ids come from
# the variants above (matched on values); the others from the check that catches them.
CATALOGUE: dict[str, str] = {
    # the cache itself
    "sinks-evicted": "the sinks evicted: the new token stored at n_seen % C, a ring over the whole cache",
    "ring-index-off-by-n-sink": "the ring index off by n_sink: token t stored at n_sink + t % window",
    "window-shifted": "the window shifted left like a queue instead of overwriting one ring slot",
    "cache-not-written": "the caches returned without the new token",
    "slot-past-capacity": "the new token written at slot n_seen although the cache is full: an index error",
    "caller-cache-mutated": "the caller's caches written in place",
    # what the query reads
    "written-after-attending": "the new token written after attending, so its slot gave what was there before",
    "empty-slots-attended": "attends to the empty slots before the cache is full",
    "window-without-new-token": "the window counted without the new token: C + 1 keys once the cache is full",
    # attention itself
    "gqa-repeat": "GQA heads expanded with repeat instead of repeat_interleave",
    "no-scale": "no 1/sqrt(d) scale",
    # the generic ones this suite can reach (it returns no bool and takes no gradient)
    **{k: v for k, v in GENERIC_MISCONCEPTIONS.items() if k not in ("not-bool", "no-gradient", "gradient-mismatch")},
}
