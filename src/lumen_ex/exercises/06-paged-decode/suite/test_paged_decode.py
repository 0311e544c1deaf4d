"""Hidden suite for exercise 6: paged_decode_step, one decoding step over a paged KV cache.

Every test builds seeded float64 inputs on the CPU (src/lumen_ex/exercises/06-paged-decode/suite/cases.py:
a fixed layout of pages, poisoned where no sequence may read, and seeded values), computes the
reference from fresh copies of them before the call, sends the inputs (floats cast to the dtype
under test, block_table and seq_lens int64) to the learner's code through ``submission``, and
checks what came back shape first, then dtype and device, then values: the pools before y_t (the
write comes first in a step, and a wrong write explains a wrong y_t), then seq_lens. The
docstring's first line is what the learner sees as the test's name.

The pools are written in place. The harness never sees the learner's tensor objects, only values:
the returned pools must hold the new entries and nothing else changed, and the arguments as the
worker holds them after the call (``echo_args``) show whether the caller's pools got them too.

There is no test on torch's meta device (exercise 2 has one): a paged step reads the block table
and the lengths, which a meta tensor does not hold, so code that reads them (int(seq_lens[b]), a
per-sequence loop) could not run there. The device is checked on CUDA, where there is one.

Axis names in feedback: B sequences, H query heads (n_heads), H_kv key/value heads (n_kv_heads),
d_head the width of one head, d_model the model width, n_pages the pool's pages, page_size the
slots of a page, max_pages the block table's width.
"""

from __future__ import annotations

import dataclasses
import re
from contextlib import contextmanager

import pytest
import torch

from lumen_ex.author import CheckFailed, Expected, Tolerance, exercise, expect, fail, inputs, meta, sibling

ref = exercise(__file__).reference
variants = exercise(__file__).mistakes
cases = sibling(__file__, "suite/cases")

FN = "paged_decode_step"
PARAMS = ("x_t", "k_pages", "v_pages", "block_table", "seq_lens", "w_q", "w_k", "w_v", "w_o", "n_heads")
OUTPUTS = ("y_t", "k_pages", "v_pages", "seq_lens")
Y_AXES = ("B", "d_model")
POOL_AXES = ("n_pages", "H_kv", "page_size", "d_head")
ENTRY_AXES = ("B", "H_kv", "d_head")
LEN_AXES = ("B",)
EXACT = Tolerance(0.0, 0.0)
POOLS = ((1, "k_pages"), (2, "v_pages"))     # argument index, name

# Head layouts and lengths, on top of cases.PAGED_SIZES (B=3, H=6, H_kv=2, d_head=4, d_model=11,
# page_size=5, max_pages=7, n_pages=13) and cases.LENGTHS (new tokens at 20, 14 and 2).
GQA = {}
MHA = {"n_kv_heads": 6}
MQA = {"n_kv_heads": 1}
# Distinct sizes: B=4, H=8, H_kv=2, d_head=16, d_model=96, page_size=12, max_pages=9, n_pages=25;
# t = 100, 47 (the last slot of a page), 60 (a page's first slot) and 3.
REALISTIC = {"n_heads": 8, "n_kv_heads": 2, "d_head": 16, "d_model": 96, "page_size": 12, "max_pages": 9,
             "n_pages": 25, "lengths": (100, 47, 60, 3)}
FIRST_TOKEN = (10, 0, 4)         # sequence 1 has nothing cached yet; 10 opens a page, 4 fills one
BOUNDARIES = (19, 10, 4)         # every new token on a page's first or last slot

# For the dtype tests (float16 and bfloat16 are matched at 1e-2 and 2e-2): a wide head keeps the known
# mistakes apart, 1/sqrt(d_model) = 1/sqrt(29) far from 1/sqrt(d_head) = 1/sqrt(12) and from 1/d_head;
# all sizes stay distinct (H*d_head = 72, H_kv*d_head = 24).
DTYPE_SIZES = {"d_head": 12, "d_model": 29}

# The whole-sequence test: three sequences that start with 0, 3 and 8 tokens cached and decode
# DECODE_STEPS more each, crossing page boundaries at different steps.
PREFILL = (0, 3, 8)
DECODE_STEPS = 7


def _projection_transposed(exc) -> bool:
    """A matmul size mismatch on a line that projects with F.linear(x, W) or a transposed weight."""
    if "cannot be multiplied" not in exc.message and "must match the size" not in exc.message:
        return False
    return bool(re.search(r"\blinear\(|\bw_[qkvo]\w*\.(T|mT|t\(\))|\bw_[qkvo]\w*\.transpose\(",
                          expect.failing_line(exc)))


def _pool_view(exc) -> bool:
    """.view() refused on a line that reshapes a pool: the pools may be strided views."""
    return ("view size is not compatible" in exc.message
            and bool(re.search(r"pages|pool", expect.failing_line(exc))))


POOL_VIEW_SENTENCE = (
    "the pools may come as non-contiguous views, which .view() cannot flatten, and reshape() would quietly "
    "make a copy that the caller never sees: write through indexing on the pool itself, "
    "k_pages[page, :, slot] = k_new, and flatten (with reshape) only to read")

NAMED_EXCEPTIONS = [
    ("projection-transposed", "the weights are (d_model, n_heads * d_head), laid out to sit on the right: project "
     "with x_t @ w_q. F.linear(x, W) computes x @ W.T, and W.T transposes them the wrong way", _projection_transposed),
    ("pool-view-copy", POOL_VIEW_SENTENCE, _pool_view),
]


def axis_sizes(s: dict) -> dict[str, int]:
    """Every axis name with its size, for naming the axes of a wrong shape (on a tie, the first name wins)."""
    named = {"B": s["B"], "H": s["n_heads"], "H_kv": s["n_kv_heads"], "d_head": s["d_head"], "d_model": s["d_model"],
             "n_pages": s["n_pages"], "page_size": s["page_size"], "max_pages": s["max_pages"],
             "H*d_head": s["n_heads"] * s["d_head"], "H_kv*d_head": s["n_kv_heads"] * s["d_head"]}
    out: dict[str, int] = {}
    for name, size in named.items():
        if size not in out.values():
            out[name] = size
    return out


def case_for(seed: int, sizes: dict | None = None, **extra) -> cases.PagedCase:
    sizes = dict(sizes or {})
    lengths = sizes.pop("lengths", cases.LENGTHS)
    return cases.paged_case(seed, lengths=extra.pop("lengths", lengths), **sizes, **extra)


def new_cells(case) -> list[tuple[int, int]]:
    """The (page, slot) each sequence's new token is written to."""
    ps = case.sizes["page_size"]
    return [(int(case.block_table[b, t // ps]), t % ps) for b, t in enumerate(case.lengths)]


def decode(submission, case, *, dtype=torch.float32, device="cpu", args=None, **options):
    """Call the learner's paged_decode_step: the CallResult and its (y_t, k_pages, v_pages, seq_lens)."""
    with expect.exceptions_named(NAMED_EXCEPTIONS):
        result = submission.call(FN, tuple(args if args is not None else case.args(dtype)), device=device, **options)
    return result, expect.returns(result.value, OUTPUTS, FN)


def expected_step(case):
    """The reference (y_t, k_pages, v_pages, seq_lens) in float64, and the variants of each, for ``case``."""
    return ref.paged_decode_step(*case.fresh()), (lambda which: lambda: variants.step_variants(*case.fresh(), which=which))


# -------------------------------------------------------------------------------------------------
# Feedback: shapes, the slots of a pool, the block table


def _shape_hint(what: str, got: list[int], s: dict) -> tuple[str, str] | None:
    B, H, d_head = s["B"], s["n_heads"], s["d_head"]
    if what == "y_t" and got == [B, H * d_head]:
        return ("no-output-projection",
                "y_t is still (B, n_heads * d_head): after merging the heads, apply the output projection w_o.")
    if what in ("k_pages", "v_pages") and len(got) == 4 and got[0] == B:
        return (None, f"{what} must come back as the whole pool (n_pages, n_kv_heads, page_size, d_head), "
                "the tensor you were given with the new entries written into it, not one sequence's keys.")
    return None


def _pool_details(diag, got: torch.Tensor, exp: torch.Tensor, case, tol: Tolerance) -> None:
    """Name the wrong slots of a pool and whose they are; 'other-slots-written' when only slots that
    hold no new token are wrong."""
    g, e = got.detach().to(torch.float64), exp.to(torch.float64)
    wrong = ((g - e).abs() > tol.atol + tol.rtol * e.abs()).any(dim=3).any(dim=1)     # (n_pages, page_size)
    cells = [(int(p), int(s)) for p, s in wrong.nonzero()]
    ps = case.sizes["page_size"]
    diag.details["pool_slots"] = [cases.owner(case.block_table, case.seq_lens, p, s, ps) for p, s in cells[:8]]
    if diag.misconception:
        return
    news = set(new_cells(case))
    if cells and not news & set(cells):
        diag.misconception = "other-slots-written"
        diag.hint = (f"the new entries are right, but {len(cells)} other slot(s) changed: "
                     + "; ".join(diag.details["pool_slots"][:3])
                     + ". Write only the new token's slot of each sequence, and leave every other slot as it was.")
    elif cells:
        diag.hint = ("Wrong slots: " + "; ".join(diag.details["pool_slots"][:3]) + ". Sequence b's new entry goes to "
                     "page block_table[b, t // page_size], slot t % page_size, with t = seq_lens[b].")


def _y_picture(diag, case) -> None:
    """Draw the block table of the first sequence whose y_t is wrong, with the slots it must read and,
    when a mistake is named, the slots that mistake reads."""
    if diag.kind == "values":
        b = int((diag.details.get("batch_items") or [0])[0])
    else:
        b = int((diag.details.get("index") or [0])[0])
    ps = case.sizes["page_size"]
    rows = [("should read", cases.should_read(case.block_table, case.seq_lens, ps, b), "@", "#")]
    reads = variants.reads_of(diag.misconception or "", case.block_table, case.seq_lens, b, ps)
    if reads:
        cells, stale = reads
        rows.append(("yours reads", cells, "s" if stale else "@", "#"))
    diag.details["block_table"] = cases.block_table_picture(case.block_table, case.seq_lens, ps, b, rows)


def _pool_picture(diag, got: torch.Tensor, case, which: int, sent: list | None) -> None:
    """Draw the block table of the first sequence whose new slot is wrong (or that owns the first
    wrong slot), with the slot it must write and the slots the learner's pool changed from the pool
    it was sent (``sent``, the arguments; by default the case's pool in the returned dtype)."""
    before = (sent[which] if sent is not None else case.tensors()[which]).to(got.dtype)
    written = (got != before).any(dim=3).any(dim=1)                                # (n_pages, page_size)
    changed = {(int(p), int(s)) for p, s in written.nonzero()}
    ps = case.sizes["page_size"]
    news = new_cells(case)
    b = next((b for b, cell in enumerate(news) if cell not in changed), None)
    if b is None:
        owned = [b for b in range(len(news)) if any(p in case.block_table[b].tolist() for p, _ in changed)]
        b = owned[0] if owned else 0
    changed -= {cell for i, cell in enumerate(news) if i != b and cell in changed}   # the others' own new slots
    rows = [("should write", {news[b]}, "@", "x"), ("yours writes", changed, "@", "x")]
    diag.details["block_table"] = cases.block_table_picture(case.block_table, case.seq_lens, ps, b, rows)


@contextmanager
def diagnosed(case):
    """Refine a failed check: the mistake a shape points to, the slots of a wrong pool, the block
    table of a sequence whose y_t is wrong."""
    try:
        yield
    except CheckFailed as exc:
        diag = exc.diagnosis
        what = diag.summary.split(":")[0]
        if diag.kind == "shape" and diag.misconception != "outputs-swapped":
            named = _shape_hint(what, list(diag.got or []), case.sizes)
            if named:
                diag.misconception = named[0] or diag.misconception
                diag.hint = named[1]
        elif diag.kind in ("values", "nonfinite") and what == "y_t":
            _y_picture(diag, case)
        diag.details.setdefault("lengths", list(case.lengths))
        raise


def _check_lengths_kind(lens, device: str) -> None:
    """seq_lens comes back int64, on the inputs' device: checked before any values."""
    if lens.dtype != torch.int64:
        raise fail("dtype", f"seq_lens has dtype {str(lens.dtype).removeprefix('torch.')}; it must stay int64",
                   expected="int64", got=str(lens.dtype).removeprefix("torch."), misconception="lengths-not-int64",
                   hint="seq_lens stays int64 (torch.long): seq_lens + 1 keeps it; seq_lens + 1.0, .float() or "
                        ".int() do not.")
    where = meta(lens).device
    if where.split(":")[0] != device.split(":")[0]:
        raise fail("device", f"seq_lens is on {where}; the inputs were on {device}", expected=device, got=where,
                   hint="Compute the new lengths from the ones you were given: seq_lens + 1.")


def check_outputs(got, expected, variants_of, case, *, dtype, device, sent: list | None = None) -> None:
    """The staged checks of every output: shapes, dtypes and devices, then the pools, y_t and seq_lens.
    ``sent``: the arguments the call was given, when they are not ``case.args(dtype)``."""
    y, kp, vp, lens = got
    exp_y, exp_k, exp_v, exp_l = expected
    names = axis_sizes(case.sizes)
    tol = expect.TOLERANCES[dtype]
    with diagnosed(case):
        expect.shapes([Expected(y, exp_y, "y_t", Y_AXES), Expected(kp, exp_k, "k_pages", POOL_AXES),
                       Expected(vp, exp_v, "v_pages", POOL_AXES), Expected(lens, exp_l, "seq_lens", LEN_AXES)],
                      sizes=names)
        _check_lengths_kind(lens, device)
        items = [Expected(kp, exp_k, "k_pages", POOL_AXES, variants_of(variants.K_PAGES)),
                 Expected(vp, exp_v, "v_pages", POOL_AXES, variants_of(variants.V_PAGES)),
                 Expected(y, exp_y, "y_t", Y_AXES, variants_of(variants.Y_T))]
        try:
            expect.tensors(items, sizes=names, dtype=dtype, device=device)
        except CheckFailed as exc:
            diag = exc.diagnosis
            pool = next((it for it in items[:2] if diag.summary.startswith(it.what + ":")), None)
            if pool is not None and diag.kind == "values":
                _pool_details(diag, pool.got, pool.value, case, tol)
                _pool_picture(diag, pool.got, case, 1 if pool is items[0] else 2, sent)
            raise
        expect.tensors([Expected(lens, exp_l, "seq_lens", LEN_AXES, variants_of(variants.SEQ_LENS), EXACT)],
                       sizes=names, dtype=torch.int64, device=device)


def check_step(submission, case, *, dtype=torch.float32, device="cpu", **options):
    """The learner's (y_t, k_pages, v_pages, seq_lens) must match the float64 reference on ``case``."""
    expected, variants_of = expected_step(case)            # from the inputs, before the call
    result, got = decode(submission, case, dtype=dtype, device=device, **options)
    check_outputs(got, expected, variants_of, case, dtype=dtype, device=device)
    return result, got, expected


# -------------------------------------------------------------------------------------------------
# The caller's arguments after the call


def _others_mask(case) -> torch.Tensor:
    """(n_pages, page_size): True for every slot that holds no new token."""
    mask = torch.ones(case.sizes["n_pages"], case.sizes["page_size"], dtype=torch.bool)
    for page, slot in new_cells(case):
        mask[page, slot] = False
    return mask


def _changed_slots(now: torch.Tensor, before: torch.Tensor, case) -> list[str]:
    """The slots other than the new tokens' where ``now`` differs from ``before`` (bitwise), in words."""
    differ = (now != before).any(dim=3).any(dim=1) & _others_mask(case)              # (n_pages, page_size)
    ps = case.sizes["page_size"]
    return [cases.owner(case.block_table, case.seq_lens, int(p), int(s), ps) for p, s in differ.nonzero()]


def _echoed(result, sent) -> tuple:
    after = result.args_after
    if not isinstance(after, tuple) or len(after) != len(sent):
        raise fail("protocol", "the worker did not send the arguments back after the call")
    return after


def check_caller_pools(result, sent, expected, case, *, dtype=torch.float32, noncontiguous=False) -> None:
    """The caller's pools, as the worker holds them after the call, hold the new entries (within the
    tolerance) and every other slot exactly as it was."""
    after = _echoed(result, sent)
    copy_hint = ("Write into the pools you were given: k_pages[page, :, slot] = k_new (or index_put_). "
                 "k_pages.clone(), torch.cat, .contiguous() or a new tensor are copies, and writes into a "
                 "copy never reach the caller" + (", and on a non-contiguous pool so is reshape()" if noncontiguous
                                                  else "") + ". Return the same pool tensors.")
    cells = new_cells(case)
    pages = torch.tensor([p for p, _ in cells])
    slots = torch.tensor([s for _, s in cells])
    for (i, name), exp in zip(POOLS, expected[1:3]):
        before, now = sent[i], after[i]
        if not isinstance(now, torch.Tensor) or now.shape != before.shape or now.dtype != before.dtype:
            raise fail("property", f"the caller's {name} was replaced (its shape or dtype changed): "
                       f"{tuple(before.shape)} {before.dtype} before the call", hint=copy_hint)
        if torch.equal(now, before):
            raise fail("property", f"the caller's {name} does not hold the new entries: it is exactly as it was "
                       "sent, so the new key and value went into a copy", misconception="pools-copied",
                       hint=copy_hint, details={"new_slots": [list(c) for c in cells]})
        entries = now[pages, :, slots]                                            # (B, H_kv, d_head)
        sep = expect.separation(entries, exp[pages, :, slots], expect.TOLERANCES[dtype])
        if sep > 1.0:
            raise fail("property", f"the caller's {name} changed, but its new tokens' slots do not hold the new "
                       "entries you returned: write them into the pool you were given, and return that pool",
                       misconception="pools-copied", hint=copy_hint, details={"new_slots": [list(c) for c in cells]})
        changed = _changed_slots(now, before, case)
        if changed:
            raise fail("property", f"your step changed {len(changed)} slot(s) of the caller's {name} that hold no "
                       f"new token: {changed[0]}", misconception="other-slots-written", details={"slots": changed[:8]},
                       hint="Only the new token's slot of each sequence may change; every other slot, stale ones "
                            "included, must stay as it was.")


def _sliced(variants_of, which, pages, slots):
    """The variants of a pool, at the new tokens' slots only."""
    return lambda: [dataclasses.replace(v, value=v.value[pages, :, slots]) for v in variants_of(which)()]


def _take(t, pages, slots):
    out = t[pages, :, slots]
    out.lumen_meta = meta(t)
    return out


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_signature(submission):
    """paged_decode_step has the stub's parameters"""
    expect.signature(submission, FN, PARAMS)


@pytest.mark.group("contract")
def test_returns_four_tensors(submission, seed, device):
    """returns (y_t, k_pages, v_pages, seq_lens)"""
    decode(submission, case_for(seed), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes


@pytest.mark.group("shapes")
def test_shapes(submission, seed, device):
    """y_t (B, d_model), the pools as given, seq_lens (B,)"""
    case = case_for(seed)
    (exp_y, exp_k, exp_v, exp_l), _ = expected_step(case)
    _, (y, kp, vp, lens) = decode(submission, case, device=device)
    with diagnosed(case):
        expect.shapes([Expected(y, exp_y, "y_t", Y_AXES), Expected(kp, exp_k, "k_pages", POOL_AXES),
                       Expected(vp, exp_v, "v_pages", POOL_AXES), Expected(lens, exp_l, "seq_lens", LEN_AXES)],
                      sizes=axis_sizes(case.sizes))


# -------------------------------------------------------------------------------------------------
# Values


@pytest.mark.group("values")
@pytest.mark.parametrize("sizes", [GQA, MHA, MQA], ids=["gqa", "mha", "mqa"])
def test_values(submission, seed, device, sizes):
    """y_t, pools and seq_lens match the reference"""
    check_step(submission, case_for(seed, sizes), device=device)


@pytest.mark.group("values")
def test_realistic_size(submission, seed, device):
    """realistic sizes (t up to 100, page_size 12, d_head 16)"""
    check_step(submission, case_for(seed, REALISTIC), device=device)


# -------------------------------------------------------------------------------------------------
# The pages


@pytest.mark.group("pages")
def test_new_entries_written(submission, seed, device):
    """each new key and value goes to page block_table[b, t // page_size], slot t % page_size"""
    case = case_for(seed)
    expected, variants_of = expected_step(case)
    _, got = decode(submission, case, device=device)
    names = axis_sizes(case.sizes)
    cells = new_cells(case)
    pages, slots = torch.tensor([p for p, _ in cells]), torch.tensor([s for _, s in cells])
    with diagnosed(case):
        expect.shapes([Expected(got[i], expected[i], name, POOL_AXES) for i, name in POOLS], sizes=names)
    where = ", ".join(f"page {p} slot {s}" for p, s in cells)
    expect.tensors([Expected(_take(got[i], pages, slots), expected[i][pages, :, slots], f"{name}[new slots: {where}]",
                             ENTRY_AXES, _sliced(variants_of, i, pages, slots)) for i, name in POOLS],
                   sizes=names, dtype=torch.float32, device=device)


@pytest.mark.group("pages")
def test_other_slots_untouched(submission, seed, device):
    """every other slot of the pools stays bitwise as it was"""
    case = case_for(seed)
    sent = case.args(torch.float32)
    expected, _ = expected_step(case)
    result, got = decode(submission, case, device=device, args=sent, echo_args=True)
    after = _echoed(result, sent)
    with diagnosed(case):
        expect.shapes([Expected(got[i], expected[i], name, POOL_AXES) for i, name in POOLS],
                      sizes=axis_sizes(case.sizes))
    hint = ("Only the new token's slot of each sequence may change: the other slots of its last page (stale "
            "entries past its length), other sequences' pages and free pages stay exactly as they were.")
    for (i, name) in POOLS:
        for label, now in ((f"the returned {name}", got[i]), (f"the caller's {name}", after[i])):
            if not isinstance(now, torch.Tensor) or now.shape != sent[i].shape or now.dtype != sent[i].dtype:
                continue                      # a replaced pool: test_pools_written_in_place says so
            changed = _changed_slots(now.to(sent[i].dtype), sent[i], case)
            if changed:
                raise fail("property", f"{label}: {len(changed)} slot(s) that hold no new token changed; the first, "
                           f"{changed[0]}", misconception="other-slots-written", details={"slots": changed[:8]},
                           hint=hint)


@pytest.mark.group("pages")
def test_pools_written_in_place(submission, seed, device):
    """the caller's pools hold the new entries (written in place)"""
    case = case_for(seed)
    sent = case.args(torch.float32)
    result, _, expected = check_step(submission, case, device=device, args=sent, echo_args=True)
    check_caller_pools(result, sent, expected, case)


@pytest.mark.group("pages")
def test_seq_lens_and_inputs_unchanged(submission, seed, device):
    """the caller's seq_lens, block_table, x_t and weights are not modified"""
    case = case_for(seed)
    sent = case.args(torch.float32)
    result, _ = decode(submission, case, device=device, args=sent, echo_args=True)
    after = _echoed(result, sent)
    for i, name in enumerate(PARAMS):
        before, now = sent[i], after[i]
        if not isinstance(before, torch.Tensor) or name in ("k_pages", "v_pages"):
            continue
        same = isinstance(now, torch.Tensor) and now.shape == before.shape and now.dtype == before.dtype \
            and torch.equal(now, before)
        if same:
            continue
        if name == "seq_lens":
            shown = now.tolist() if isinstance(now, torch.Tensor) else now
            raise fail("side-effect", "paged_decode_step wrote into the caller's seq_lens: "
                       f"{before.tolist()} before the call, {shown} after",
                       misconception="seq-lens-mutated",
                       hint="Return seq_lens + 1, a new tensor; seq_lens += 1 or seq_lens.add_(1) changes the "
                            "caller's lengths, which the scheduler still owns.")
        raise fail("side-effect", f"paged_decode_step changed the caller's {name} in place",
                   misconception="argument-mutated",
                   hint=f"Only the pools are written in place; leave {name} as it was given.")


@pytest.mark.group("pages")
def test_noncontiguous_inputs(submission, seed, device):
    """non-contiguous inputs, pools included, still written in place"""
    case = case_for(seed)
    sent = case.args(torch.float32)
    try:
        result, _, expected = check_step(submission, case, device=device, args=sent, echo_args=True,
                                         noncontiguous=True)
    except CheckFailed as exc:
        diag = exc.diagnosis
        if diag.kind == "values" and diag.misconception == "pools-not-written":
            diag.misconception, diag.hint = "pool-view-copy", POOL_VIEW_SENTENCE
        raise
    check_caller_pools(result, sent, expected, case, noncontiguous=True)


# -------------------------------------------------------------------------------------------------
# Lengths


@pytest.mark.group("lengths")
def test_first_token(submission, seed, device):
    """a sequence with nothing cached yet (t = 0) beside longer ones"""
    check_step(submission, case_for(seed, lengths=FIRST_TOKEN), device=device)


@pytest.mark.group("lengths")
def test_page_boundaries(submission, seed, device):
    """new tokens on the first and the last slot of a page"""
    check_step(submission, case_for(seed, lengths=BOUNDARIES), device=device)


# -------------------------------------------------------------------------------------------------
# Decoding whole sequences


def _decode_setup(seed: int):
    """Three sequences of tokens, their pages (the prefilled tokens written in), and full causal
    attention over each: (x (B, max length, d_model), the case before step 0, the full outputs
    (one (length, d_model) tensor per sequence))."""
    s = dict(cases.PAGED_SIZES)
    totals = [p + DECODE_STEPS for p in PREFILL]
    gen = inputs.generator(seed)
    H, Hkv, d, D, ps = s["n_heads"], s["n_kv_heads"], s["d_head"], s["d_model"], s["page_size"]
    x = inputs.randn(gen, len(PREFILL), max(totals), D)                           # (B, L, d_model)
    w_q, w_k, w_v, w_o = inputs.projections(gen, D, H, Hkv, d)
    block_table, _ = cases.layout([n - 1 for n in totals], ps, s["max_pages"], s["n_pages"])
    k_pages, v_pages = cases.poisoned_pools(gen, s)
    for b, p in enumerate(PREFILL):
        keys = (x[b, :p] @ w_k).reshape(p, Hkv, d).transpose(0, 1)                 # (H_kv, p, d_head)
        values = (x[b, :p] @ w_v).reshape(p, Hkv, d).transpose(0, 1)
        cases.fill_sequence(k_pages, v_pages, block_table, b, keys, values, ps)
    full = [cases.causal_attention(x[b, :n], w_q, w_k, w_v, w_o, H) for b, n in enumerate(totals)]
    case = cases.PagedCase(x[:, 0], k_pages, v_pages, block_table, torch.tensor(PREFILL), w_q, w_k, w_v, w_o,
                           H, {**s, "B": len(PREFILL)}, PREFILL)
    return x, case, full


@pytest.mark.group("decode")
def test_decode_matches_full_attention(submission, seed, device):
    """token by token through the pages = full causal attention"""
    x, case, full = _decode_setup(seed)
    dtype = torch.float32
    sent = case.args(dtype)                  # the learner's own pools and lengths go back in at every step
    for i in range(DECODE_STEPS):
        t = [p + i for p in PREFILL]
        x_t = torch.stack([x[b, pos] for b, pos in enumerate(t)])                  # (B, d_model)
        case = dataclasses.replace(case, x_t=x_t, lengths=tuple(t))
        (_, exp_k, exp_v, exp_l), variants_of = expected_step(case)
        exp_y = torch.stack([full[b][pos] for b, pos in enumerate(t)])             # (B, d_model)
        sent[0] = x_t.to(dtype)
        _, got = decode(submission, case, device=device, args=sent)
        try:
            check_outputs(got, (exp_y, exp_k, exp_v, exp_l), variants_of, case, dtype=dtype, device=device,
                          sent=sent)
        except CheckFailed as exc:
            diag = exc.diagnosis
            matched = "the first step" if i == 0 else f"steps 1-{i} match but step {i + 1}"
            diag.summary = (f"decoding {DECODE_STEPS} tokens per sequence (new tokens at t = {t}), {matched} "
                            f"differs: {diag.summary}")
            diag.details["step"] = i
            raise
        sent[1], sent[2], sent[4] = got[1], got[2], got[3]
        case = dataclasses.replace(case, k_pages=exp_k, v_pages=exp_v, seq_lens=exp_l)


# -------------------------------------------------------------------------------------------------
# Dtypes


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """keeps the inputs' dtype"""
    # Bounded inputs, and the reference computed from them as rounded to ``dtype``: what is left is
    # the learner's arithmetic, well inside the tolerance at every seed.
    case = case_for(seed, DTYPE_SIZES, bound=inputs.DTYPE_BOUND).rounded(dtype)
    check_step(submission, case, dtype=dtype, device=device)


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    case = case_for(seed)
    sent = case.args(torch.float32)
    result, _, expected = check_step(submission, case, device=cuda, args=sent, echo_args=True)
    check_caller_pools(result, sent, expected, case)
