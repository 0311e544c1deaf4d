"""Known wrong versions of exercise 6, computed in float64 on the same inputs as the reference.

When a learner's results differ from the reference, the suite compares them with each variant here
and names the first one that matches. Every variant is one paged decode step with exactly one
thing done differently: where the new entry is written, which slots each sequence reads, or how the
attention over them is computed. The step is written out plainly (a loop over the sequences and the
positions each one reads), so that a variant is one knob, and the slots it reads can be drawn
(:func:`slots_read`; src/lumen_ex/exercises/06-paged-decode/suite/cases.py draws them).

The hidden inputs (src/lumen_ex/exercises/06-paged-decode/suite/cases.py) keep the variants apart: stale,
free and unused pages are poisoned, the lengths differ and sit on page boundaries.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import Variant

Y_T, K_PAGES, V_PAGES, SEQ_LENS = 0, 1, 2, 3


def _positions(read: str, t: int, max_t: int, page_size: int, max_pages: int) -> range | list[int]:
    """The positions one sequence (its new token at t) reads under a reading rule."""
    last = max_pages * page_size
    return {"right": range(t + 1), "old": range(t), "new": [t], "one-past": range(min(t + 2, last)),
            "last-page": range((t // page_size + 1) * page_size), "padded": range(max_t + 1),
            "table": range(last)}[read]


def slots_read(block_table, seq_lens, b: int, page_size: int, *, read: str = "right",
               rows: str = "own") -> list[tuple[int, int]]:
    """The physical (page, slot) pairs sequence b reads, in order of position.

    read: "right" (0..t), "old" (0..t-1), "new" (t alone), "one-past" (0..t+1), "last-page" (every
    slot of the pages 0..t touches), "padded" (0..max t of the batch) or "table" (every entry).
    rows: "own" (block_table[b]), "row0" (block_table[0] for every sequence) or "logical" (logical
    page j read as physical page j).
    """
    t, max_t = int(seq_lens[b]), int(seq_lens.max())
    row = (block_table[0] if rows == "row0" else block_table[b]).tolist()    # (max_pages,) as ints
    out = []
    for pos in _positions(read, t, max_t, page_size, block_table.shape[1]):
        j = pos // page_size
        out.append((j if rows == "logical" else row[j], pos % page_size))
    return out


def write_slot(block_table, t: int, b: int, page_size: int, write: str) -> tuple[int, int] | None:
    """Where sequence b's new entry is written: "right" (t), "t+1", "t-1", "slot-page-index" (page
    t // page_size, slot t // page_size too), "logical" (physical page t // page_size) or "none"."""
    if write == "none":
        return None
    pos = {"t+1": t + 1, "t-1": t - 1}.get(write, t)
    j, slot = pos // page_size, pos % page_size          # floor division: t-1 = -1 is the row's last entry
    if write == "slot-page-index":
        slot = j
    return (j if write == "logical" else int(block_table[b, j]), slot)


def _split(x, n: int, order: str = "right"):
    """(B, n * d_head) -> (B, n, d_head); order="wrong" reads it as (B, d_head, n)."""
    B, width = x.shape
    if order == "wrong":
        return x.reshape(B, width // n, n).transpose(1, 2)
    return x.reshape(B, n, width // n)


def step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads, *, write="right",
         read="right", rows="own", stale=False, expand="interleave", split="right", merge="right",
         scale=None, softmax_dim=-1, entries_swapped=False, attend=True):
    """One paged decode step with one knob turned: (y_t, k_pages, v_pages, seq_lens + 1) in float64,
    the pools as new tensors (the ones given are not changed). None when the knob makes no sense on
    these inputs (a slot or page out of range, nothing to attend to).

    stale: attend over the pools as they were before the write (the new token's slot still holds
    its stale entry). entries_swapped: the new value is written into k_pages and the key into v_pages.
    attend=False: only the write (y_t is None), for the variants of the returned pools.
    """
    B = x_t.shape[0]
    n_kv, page_size = k_pages.shape[1], k_pages.shape[2]
    q = _split(x_t @ w_q, n_heads, split)                          # (B, n_heads, d_head)
    k_new = _split(x_t @ w_k, n_kv, split)                         # (B, n_kv_heads, d_head)
    v_new = _split(x_t @ w_v, n_kv, split)
    if entries_swapped:
        k_new, v_new = v_new, k_new
    kp, vp = k_pages.clone(), v_pages.clone()
    for b in range(B):
        try:
            where = write_slot(block_table, int(seq_lens[b]), b, page_size, write)
        except IndexError:                                          # past the block table's last entry
            return None
        if where is not None:
            page, slot = where
            if not (-kp.shape[0] <= page < kp.shape[0] and slot < page_size):
                return None
            kp[page, :, slot] = k_new[b]
            vp[page, :, slot] = v_new[b]
    if not attend:
        return None, kp, vp, seq_lens + 1
    src_k, src_v = (k_pages, v_pages) if stale else (kp, vp)
    d_head = k_pages.shape[3]
    s = 1 / math.sqrt(d_head) if scale is None else scale
    group = n_heads // n_kv
    ys = []
    for b in range(B):
        cells = slots_read(block_table, seq_lens, b, page_size, read=read, rows=rows)
        if not cells:
            return None
        pages, slots = torch.tensor(cells).T                                 # (L,) each: one gather
        keys = src_k[pages, :, slots].transpose(0, 1)                        # (n_kv_heads, L, d_head)
        vals = src_v[pages, :, slots].transpose(0, 1)
        if expand == "interleave":
            keys, vals = keys.repeat_interleave(group, dim=0), vals.repeat_interleave(group, dim=0)
        else:
            keys, vals = keys.repeat(group, 1, 1), vals.repeat(group, 1, 1)     # (n_heads, L, d_head)
        scores = (q[b][:, None, :] @ keys.transpose(-2, -1)) * s             # (n_heads, 1, L)
        out = torch.softmax(scores, dim=softmax_dim) @ vals                  # (n_heads, 1, d_head)
        out = out[:, 0, :]                                                   # (n_heads, d_head)
        ys.append(out.T.reshape(-1) if merge == "wrong" else out.reshape(-1))
    return torch.stack(ys) @ w_o, kp, vp, seq_lens + 1


# The mistakes of y_t: (id, sentence, fix, knobs). The reading ones come first: they are what this
# exercise is about.
Y_CANDIDATES = [
    ("new-token-not-attended", "your y_t equals attention over positions 0..t-1 only, without the new token",
     "write the new key and value into the pools first, then attend to positions 0..t: the new token sees "
     "itself", dict(read="old")),
    ("stale-slot-read", "your y_t equals attention over positions 0..t read before the new entry was written: "
     "position t gave the stale entry that sat in that slot", "write k_new and v_new into the pools before you "
     "read them back (or read the new token's key and value from k_new and v_new)", dict(stale=True)),
    ("new-token-only", "your y_t equals attention over the new token alone",
     "each sequence attends to all its cached positions 0..t-1 as well as the new one", dict(read="new")),
    ("read-one-past-length", "your y_t equals attention over positions 0..t+1: one slot past the sequence's end",
     "after the step sequence b holds t + 1 tokens, positions 0..t: mask position p when p > seq_lens[b]",
     dict(read="one-past")),
    ("read-last-page-whole", "your y_t equals attention over every slot of the pages a sequence uses, its last "
     "page included, past its length", "the last page is only partly filled: mask the slots past position t, "
     "(pos <= seq_lens[b])", dict(read="last-page")),
    ("read-padded-to-longest", "your y_t equals attention in which every sequence reads as many positions as the "
     "longest one, with no length mask", "each sequence reads its own positions 0..seq_lens[b]: mask the rest with "
     "-inf before the softmax", dict(read="padded")),
    ("read-whole-block-table", "your y_t equals attention over every slot of every page in the block table, "
     "unused entries included", "unused entries hold valid but foreign pages: read only positions "
     "0..seq_lens[b], the pages block_table[b, :seq_lens[b] // page_size + 1]", dict(read="table")),
    ("other-sequence-pages", "your y_t equals attention in which every sequence reads the pages of sequence 0 "
     "(the first row of the block table)", "sequence b's pages are block_table[b]: index the row of each "
     "sequence, block_table[b, pos // page_size]", dict(rows="row0")),
    ("logical-page-as-physical", "your y_t equals attention that reads logical page j from physical page j",
     "logical page j of sequence b lives in physical page block_table[b, j]: look it up",
     dict(rows="logical")),
    ("gqa-repeat", "your y_t equals grouped-query attention with the KV heads tiled (repeat) instead of grouped",
     "query head h reads KV head h // (n_heads // n_kv_heads), which is what "
     "repeat_interleave(n_heads // n_kv_heads, dim=...) gives", dict(expand="repeat")),
    ("heads-split-wrong-order", "your y_t equals attention with the projections split into heads as "
     "(B, d_head, n_heads)", "the columns are grouped head by head, so reshape to (B, n_heads, d_head)",
     dict(split="wrong")),
    ("heads-merged-wrong-order", "your y_t equals attention whose heads are merged as (B, d_head, n_heads)",
     "merge (B, n_heads, d_head) with a plain reshape to (B, n_heads * d_head), no transpose",
     dict(merge="wrong")),
    ("softmax-over-heads", "your y_t equals a softmax over the heads axis", "normalise over the keys, dim=-1",
     dict(softmax_dim=0)),
    ("no-scale", "your y_t equals attention without the 1/sqrt(d_head) scale",
     "divide the scores by math.sqrt(d_head)", dict(scale=1.0)),
]

# The mistakes of the returned pools (which=K_PAGES or V_PAGES): (id, sentence, fix, knobs).
POOL_CANDIDATES = [
    ("pools-not-written", "your {name} is the pool you were given, without the new entries",
     "write the new key and value into the pools, at page block_table[b, t // page_size], slot "
     "t % page_size, and return those same pools", dict(write="none")),
    ("write-at-t+1", "your {name} has each new entry one position too far, at t + 1",
     "the new token's position is t = seq_lens[b] (positions count from 0, so t tokens fill 0..t-1)",
     dict(write="t+1")),
    ("write-at-t-1", "your {name} has each new entry one position too early, at t - 1, over the last cached token",
     "seq_lens[b] counts the tokens cached before this step: the new one goes at position t = seq_lens[b]",
     dict(write="t-1")),
    ("slot-is-page-index", "your {name} has each new entry on the right page but in slot t // page_size",
     "the slot within the page is t % page_size", dict(write="slot-page-index")),
    ("logical-page-as-physical", "your {name} has each new entry in physical page t // page_size, the logical "
     "page number", "look the physical page up: block_table[b, t // page_size]", dict(write="logical")),
    ("new-entries-swapped", "your {name} received the other projection's new entry",
     "k_pages gets x_t @ w_k and v_pages gets x_t @ w_v", dict(entries_swapped=True)),
    ("new-entry-split-wrong-order", "the new entries in your {name} are split into heads in the wrong order",
     "the projection's columns are grouped head by head, so reshape to (B, n_kv_heads, d_head)",
     dict(split="wrong")),
]


def _applies(name: str, knobs: dict, n_kv_heads: int, n_heads: int, block_table, seq_lens) -> bool:
    if name == "gqa-repeat":
        return 1 < n_kv_heads < n_heads
    if name == "softmax-over-heads":
        return n_heads > 1
    if name == "other-sequence-pages":     # the other rows must fit in row 0's length
        return int(seq_lens[0]) >= int(seq_lens.max())
    return True


def step_variants(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads, *,
                  which: int = Y_T) -> list[Variant]:
    """Wrong answers for y_t (which=0), the returned k_pages (1), v_pages (2) or seq_lens (3)."""
    args = (x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads)
    n_kv_heads, d_head, d_model = k_pages.shape[1], k_pages.shape[3], x_t.shape[1]
    if which == SEQ_LENS:
        return [Variant("seq-lens-not-incremented", "your seq_lens is the one you were given",
                        seq_lens.clone(), "return seq_lens + 1: every sequence is one token longer after the step")]
    found = []
    if which in (K_PAGES, V_PAGES):
        name = "k_pages" if which == K_PAGES else "v_pages"
        right = step(*args, attend=False)
        found.append(Variant("pools-swapped", f"your {name} is the other pool",
                             right[V_PAGES if which == K_PAGES else K_PAGES],
                             "return (y_t, k_pages, v_pages, seq_lens) in that order"))
        for ident, sentence, fix, knobs in POOL_CANDIDATES:
            out = step(*args, **knobs, attend=False)
            if out is not None:
                found.append(Variant(ident, sentence.format(name=name), out[which], fix))
        return found
    cands = [*Y_CANDIDATES,
             ("scale-1/sqrt(d_model)", "your y_t equals attention scaled by 1/sqrt(d_model)",
              "the scale uses the width of one head, d_head = w_q.shape[1] // n_heads", dict(scale=1 / math.sqrt(d_model))),
             ("scale-1/d_head", "your y_t equals attention scaled by 1/d_head", "the scale is 1/sqrt(d_head), a square root",
              dict(scale=1 / d_head))]
    for ident, sentence, fix, knobs in cands:
        if not _applies(ident, knobs, n_kv_heads, n_heads, block_table, seq_lens):
            continue
        out = step(*args, **knobs)
        if out is not None:
            found.append(Variant(ident, sentence, out[Y_T], fix))
    return found


def reads_of(name: str, block_table, seq_lens, b: int, page_size: int) -> tuple[set[tuple[int, int]], bool] | None:
    """The slots sequence b reads under the y_t mistake ``name``, and whether it reads them before the
    write (the new token's slot then gives its stale entry); None when that mistake reads the right
    slots, after the write (it computes something else with them)."""
    knobs = next((k for ident, _, _, k in Y_CANDIDATES if ident == name), None)
    if knobs is None or not {"read", "rows", "stale"} & set(knobs):
        return None
    cells = slots_read(block_table, seq_lens, b, page_size, read=knobs.get("read", "right"),
                       rows=knobs.get("rows", "own"))
    return set(cells), bool(knobs.get("stale"))


# Every mistake this suite names, by id, with the sentence shown to the learner. Value ids come from
# the variants above (matched on values); the others from the check that catches them.
CATALOGUE: dict[str, str] = {
    # reading the cache
    "new-token-not-attended": "attends to positions 0..t-1 only: the new token is left out",
    "stale-slot-read": "reads the pools before writing the new entry, so the new token's slot gives a stale entry",
    "new-token-only": "attends to the new token only",
    "read-one-past-length": "reads one slot past the sequence's length (positions 0..t+1)",
    "read-last-page-whole": "reads every slot of the last page, past the sequence's length",
    "read-padded-to-longest": "reads as many positions as the longest sequence, with no length mask",
    "read-whole-block-table": "reads every page of the block table, unused entries included",
    "other-sequence-pages": "reads another sequence's pages (block_table[0] for every sequence)",
    "logical-page-as-physical": "uses logical page j as physical page j instead of block_table[b, j]",
    # attention itself
    "gqa-repeat": "GQA heads expanded with repeat instead of repeat_interleave",
    "heads-split-wrong-order": "projections split into heads in the wrong order",
    "heads-merged-wrong-order": "heads merged in the wrong order",
    "softmax-over-heads": "softmax over the heads axis",
    "no-scale": "no 1/sqrt(d_head) scale",
    "scale-1/sqrt(d_model)": "scaled by the model width",
    "scale-1/d_head": "scores divided by d_head instead of sqrt(d_head)",
    # writing the cache
    "pools-not-written": "the pools returned without the new entries",
    "write-at-t+1": "the new entry written one position too far (t + 1)",
    "write-at-t-1": "the new entry written one position too early (t - 1), over the last cached token",
    "slot-is-page-index": "the right page, but the slot computed as t // page_size",
    "new-entries-swapped": "the new key written into v_pages and the value into k_pages",
    "new-entry-split-wrong-order": "the new entries split into heads in the wrong order",
    "pools-swapped": "k_pages and v_pages returned in each other's place",
    "pools-copied": "the new entries written into a copy of the pools: the caller's pools never get them",
    "other-slots-written": "slots other than the new tokens' changed in the pools",
    # the lengths and the other arguments
    "seq-lens-not-incremented": "seq_lens returned as it came, not seq_lens + 1",
    "seq-lens-mutated": "the caller's seq_lens written in place",
    "argument-mutated": "an argument other than the pools (x_t, block_table, a weight) changed in place",
    "lengths-not-int64": "seq_lens returned with another dtype than int64",
    # what came back rather than its values (named by the shared checks)
    "outputs-swapped": "the returned tensors are in the wrong order",
    "axes-transposed": "a returned tensor has the right axes in the wrong order",
    "dtype-upcast": "the result has a wider dtype than the inputs (.float(), .double(), NumPy)",
    "dtype-downcast": "the result has a narrower dtype than the inputs (a fixed .float(), or new tensors made "
                      "without dtype=)",
    "forbidden-api": "a library attention function called instead of implementing it",
    "unverifiable-source": "code the grader cannot check for forbidden APIs",
    "float32-not-cast-back": "computed in float32 and never cast back to the inputs' dtype",
    "new-tensor-dtype": "a new tensor made without the inputs' dtype promotes the result to float32",
    "new-tensor-device": "a new tensor made without the inputs' device: an exception on another device",
    "fill-overflows-dtype": "a fill value such as -1e9 that the inputs' dtype cannot hold (float16): an exception",
    "view-not-reshape": "view() on a transposed or non-contiguous tensor instead of reshape(): an exception",
    "pool-view-copy": "a view of a non-contiguous pool could not be taken, or reshape() silently made a copy",
    "projection-transposed": "projected with F.linear(x, W) or x @ W.T instead of x @ W: an exception",
    "no-output-projection": "the output projection w_o is missing",
}
