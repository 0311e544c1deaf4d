"""Hidden inputs for exercise 6 (paged_decode_step), and the pictures of a block table in feedback.

The layout of every case is fixed, not drawn from the seed: which physical page each logical page
is, which entries of the block table are unused and where they point, and how long each sequence
is. Only the values are seeded. So every verdict is the same at every seed, and every named
mistake reads (or writes) slots that change the answer:

- the sequences have very different lengths, the longest first (reading sequence 0's pages for
  every sequence changes the others), with new tokens that open a page (t % page_size == 0) and
  that fill its last slot (t % page_size == page_size - 1);
- physical pages are spread over the pool in an order that is neither the logical one nor one
  sequence after another;
- the unused entries of the block table hold valid page indices: other sequences' pages and free
  pages;
- every slot that no sequence may read (free pages, the slots past a sequence's length, and the
  slot the new token is about to overwrite, which holds a stale entry) is poisoned: a unit-variance
  key and a large value, 4 to 6 in magnitude, so that reading it moves y_t by far more than any
  tolerance. Poison is finite, so a correct solution that reads such slots and masks them
  (a padded view with -inf scores) gets exactly zero weight on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from lumen_ex.author import inputs

# Every axis a distinct size: B=3, H=6, H_kv=2, d_head=4, d_model=11, page_size=5, max_pages=7,
# n_pages=13 (H*d_head=24, H_kv*d_head=8). New tokens at t = 20 (opens page 4), 14 (fills the last
# slot of page 2) and 2 (inside page 0): lengths 21, 15 and 3 after the step; 9 pages used, 4 free.
PAGED_SIZES = {"B": 3, "n_heads": 6, "n_kv_heads": 2, "d_head": 4, "d_model": 11,
               "page_size": 5, "max_pages": 7, "n_pages": 13}
LENGTHS = (20, 14, 2)
POISON = (4.0, 6.0)             # the magnitude range of a poisoned value


@dataclass
class PagedCase:
    """One paged decode step: the new tokens, the page pools, the block table, the lengths and the
    four projections, in float64 (block_table and seq_lens int64)."""

    x_t: torch.Tensor
    k_pages: torch.Tensor
    v_pages: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    w_o: torch.Tensor
    n_heads: int
    sizes: dict[str, int]
    lengths: tuple[int, ...] = field(default_factory=tuple)

    def tensors(self) -> list[torch.Tensor]:
        return [self.x_t, self.k_pages, self.v_pages, self.block_table, self.seq_lens,
                self.w_q, self.w_k, self.w_v, self.w_o]

    def args(self, dtype: torch.dtype) -> list:
        """The arguments as the learner gets them: floats cast to ``dtype``, the indices int64."""
        return [t.to(dtype) if t.is_floating_point() else t.clone() for t in self.tensors()] + [self.n_heads]

    def fresh(self) -> tuple:
        """The float64 arguments as new tensors, for the reference and the variants, which write into
        the pools they are given."""
        return (*(t.clone() for t in self.tensors()), self.n_heads)

    def rounded(self, dtype: torch.dtype) -> "PagedCase":
        """The same case with every float tensor rounded to ``dtype`` (kept in float64): the reference
        then sees exactly the inputs the learner gets."""
        ts = [t.to(dtype).to(torch.float64) if t.is_floating_point() else t for t in self.tensors()]
        return PagedCase(*ts, self.n_heads, self.sizes, self.lengths)


def _stride(n: int) -> int:
    """A step through 0..n-1 that visits every page once and never two neighbours in a row."""
    return next(s for s in range(5, 5 + n) if math.gcd(s, n) == 1 and s % n not in (0, 1, n - 1))


def layout(lengths, page_size: int, max_pages: int, n_pages: int) -> tuple[torch.Tensor, list[int]]:
    """The block table (B, max_pages) and the free pages, for new tokens at positions ``lengths``.

    Sequence b owns pages for positions 0..t (t // page_size + 1 of them), handed out round-robin
    over the sequences from a strided walk through the pool. Its unused entries point, in turn, at
    pages it does not own: other sequences' pages and free ones, all valid indices.
    """
    B = len(lengths)
    used = [t // page_size + 1 for t in lengths]
    assert max(used) <= max_pages and sum(used) < n_pages, "the pool must hold every page and a free one"
    stride = _stride(n_pages)
    walk = [(3 + stride * i) % n_pages for i in range(n_pages)]
    table = [[-1] * max_pages for _ in range(B)]
    nxt = 0
    for j in range(max(used)):
        for b in range(B):
            if j < used[b]:
                table[b][j] = walk[nxt]
                nxt += 1
    free = walk[nxt:]
    for b in range(B):
        own = set(table[b][: used[b]])
        others = [p for p in (*free, *walk) if p not in own]
        others = list(dict.fromkeys(others))                        # free pages first, each once
        for k, j in enumerate(range(used[b], max_pages)):
            table[b][j] = others[(2 * b + k) % len(others)]
    return torch.tensor(table, dtype=torch.int64), free


def _poison(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Large values, 4 to 6 in magnitude with random signs."""
    lo, hi = POISON
    mag = lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(*shape, generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0)
    return mag * sign


def fill_sequence(k_pages, v_pages, block_table, b: int, keys, values, page_size: int) -> None:
    """Write ``keys``, ``values`` (n_kv_heads, T, d_head) as sequence b's positions 0..T-1."""
    for pos in range(keys.shape[1]):
        page, slot = int(block_table[b, pos // page_size]), pos % page_size
        k_pages[page, :, slot] = keys[:, pos]
        v_pages[page, :, slot] = values[:, pos]


def poisoned_pools(gen: torch.Generator, s: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """k_pages, v_pages (n_pages, H_kv, page_size, d_head), every slot stale: unit-variance keys,
    large values."""
    shape = (s["n_pages"], s["n_kv_heads"], s["page_size"], s["d_head"])
    return inputs.randn(gen, *shape), _poison(gen, *shape)


def paged_case(seed: int, *, lengths=LENGTHS, bound: float | None = None, **sizes: int) -> PagedCase:
    """Inputs for exercise 6: ``lengths`` are the tokens already cached per sequence (the new
    tokens' positions); ``bound`` clamps x_t and the cached entries to [-bound, bound] (the dtype
    tests: inputs.DTYPE_BOUND; poison stays at 4 to 6, which float16 and bfloat16 hold)."""
    s = {**PAGED_SIZES, **sizes, "B": len(lengths)}
    gen = inputs.generator(seed)
    H, Hkv, d, D, ps = s["n_heads"], s["n_kv_heads"], s["d_head"], s["d_model"], s["page_size"]
    block_table, _ = layout(lengths, ps, s["max_pages"], s["n_pages"])
    k_pages, v_pages = poisoned_pools(gen, s)
    for b, t in enumerate(lengths):
        keys = _bound(inputs.randn(gen, Hkv, t, d), bound)                # (H_kv, t, d_head)
        values = _bound(inputs.randn(gen, Hkv, t, d), bound)
        fill_sequence(k_pages, v_pages, block_table, b, keys, values, ps)
    x_t = _bound(inputs.randn(gen, len(lengths), D), bound)                # (B, d_model)
    seq_lens = torch.tensor(lengths, dtype=torch.int64)                    # (B,)
    return PagedCase(x_t, k_pages, v_pages, block_table, seq_lens, *inputs.projections(gen, D, H, Hkv, d),
                     H, s, tuple(lengths))


def _bound(x: torch.Tensor, bound: float | None) -> torch.Tensor:
    return x if bound is None else x.clamp(-bound, bound)


def causal_attention(x, w_q, w_k, w_v, w_o, n_heads: int) -> torch.Tensor:
    """Full causal grouped-query attention over one sequence x (L, d_model) -> (L, d_model), float64."""
    L = x.shape[0]
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(L, n_heads, d_head).transpose(0, 1)                   # (H, L, d_head)
    k = (x @ w_k).reshape(L, n_kv, d_head).transpose(0, 1).repeat_interleave(n_heads // n_kv, dim=0)
    v = (x @ w_v).reshape(L, n_kv, d_head).transpose(0, 1).repeat_interleave(n_heads // n_kv, dim=0)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)                         # (H, L, L)
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    out = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v    # (H, L, d_head)
    return out.transpose(0, 1).reshape(L, n_heads * d_head) @ w_o                # (L, d_model)


# -------------------------------------------------------------------------------------------------
# Pictures for the feedback


def owner(block_table: torch.Tensor, seq_lens: torch.Tensor, page: int, slot: int, page_size: int) -> str:
    """Whose slot (page, slot) is, in words: a sequence's cached position, its new token, a stale
    slot past its length, or a page no sequence owns."""
    for b in range(block_table.shape[0]):
        t = int(seq_lens[b])
        for j in range(t // page_size + 1):
            if int(block_table[b, j]) == page:
                pos = j * page_size + slot
                what = ("its new token's slot" if pos == t else f"its cached position {pos}" if pos < t
                        else f"past its length (position {pos} > t = {t})")
                return f"page {page} slot {slot}: sequence {b}'s logical page {j}, {what}"
    for b in range(block_table.shape[0]):
        listed = [j for j in range(int(seq_lens[b]) // page_size + 1, block_table.shape[1])
                  if int(block_table[b, j]) == page]
        if listed:
            return f"page {page} slot {slot}: an unused entry of sequence {b}'s block table (entry {listed[0]})"
    return f"page {page} slot {slot}: a free page, no sequence's"


def new_cell(block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, b: int) -> tuple[int, int]:
    """The (page, slot) sequence b's new token is written to."""
    t = int(seq_lens[b])
    return int(block_table[b, t // page_size]), t % page_size


def should_read(block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, b: int) -> set[tuple[int, int]]:
    """The (page, slot) pairs of sequence b's positions 0..t."""
    return {(int(block_table[b, p // page_size]), p % page_size) for p in range(int(seq_lens[b]) + 1)}


LEGEND = {"#": "# a cached position", "@": "@ the new token", "s": "s the new token's slot read before the write "
          "(its stale entry)", "x": "x a slot written"}


def block_table_picture(block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, b: int,
                        rows: list[tuple[str, set[tuple[int, int]], str, str]]) -> str:
    """Sequence b's block table as text, with one row of marks per (label, physical (page, slot)
    pairs, mark of the new token's slot, mark of the others)::

        sequence 1: seq_lens[1] = 14, the new token is position 14: page block_table[1, 2] = 8, slot 4
        logical page j  |   0   |   1   |   2   |   3   | ...
        block_table[1]  |   1   |   5   |   8   |   0   | ...
        should read     | ##### | ##### | ####@ | ..... | ...
        yours reads     | ##### | ##### | ##### | ##### | ...

    Pages the last row touches outside sequence b's block table are listed under it.
    """
    t, max_pages = int(seq_lens[b]), block_table.shape[1]
    row = [int(p) for p in block_table[b]]
    new = new_cell(block_table, seq_lens, page_size, b)

    def cells(marked: set, new_mark: str, mark: str) -> list[str]:
        return ["".join((new_mark if (row[j], s) == new else mark) if (row[j], s) in marked else "."
                        for s in range(page_size)) for j in range(max_pages)]

    width = max(page_size, 3)
    table = [("logical page j", [str(j) for j in range(max_pages)]), (f"block_table[{b}]", [str(p) for p in row]),
             *((label, cells(marked, new_mark, mark)) for label, marked, new_mark, mark in rows)]
    left = max(len(label) for label, _ in table) + 1
    lines = [f"sequence {b}: seq_lens[{b}] = {t}, the new token is position {t}: page "
             f"block_table[{b}, {t // page_size}] = {new[0]}, slot {new[1]}"]
    lines += [f"{label:<{left}}| " + " | ".join(f"{v:^{width}}" for v in values) for label, values in table]
    if rows:
        elsewhere = sorted({p for p, _ in rows[-1][1]} - set(row))
        if elsewhere:
            lines.append(f"(the last row also marks page{'s' if len(elsewhere) > 1 else ''} "
                         f"{', '.join(map(str, elsewhere))}, outside sequence {b}'s block table)")
    used = {m for _, _, new_mark, mark in rows for m in (new_mark, mark)}
    lines.append(f"{'':{left}}  " + ", ".join(LEGEND[m] for m in LEGEND if m in used) + ", . a slot not marked")
    return "\n".join(lines)
