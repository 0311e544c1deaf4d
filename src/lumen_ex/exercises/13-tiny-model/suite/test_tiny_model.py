"""Hidden suite for exercise 13: model_step, one step of a small language model.

The model is the exercise's own (data/tiny_model.safetensors, trained by tools/train_tiny_model.py
on data/training_text.txt). The inputs are windows of that text, chosen by the seed, so the model
works in the regime it was trained for; the weights go to the learner's code in float32 (float64 in
the dtype test). Every expected value is the float64 reference's, computed before the call.

Axis names in feedback: B batch, L new tokens, T cached tokens, V the vocabulary, H_kv key/value
heads, d_head the width of one head.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch

from lumen_ex.author import CheckFailed, Expected, Held, Tolerance, exercise, expect, fail, inputs, sibling

here = exercise(__file__)
ref, mistakes = here.reference, here.mistakes
model_file = sibling(__file__, "suite/model_file")

FN = "model_step"
PARAMS = ("tokens", "cache", "weights", "config")
OUTPUTS = ("logits", "cache")
WEIGHTS, CONFIG, VOCAB = model_file.load_model()
TEXT = model_file.TEXT.read_text()
PROMPTS = json.loads(model_file.load_safetensors()[1]["prompts"])
N_LAYERS, V = CONFIG["n_layers"], CONFIG["vocab_size"]
CACHE_AXES = ("B", "H_kv", "T+L", "d_head")
# Logits are sums over the model's width of float32 products, twice per layer: a correct float32
# model stays within about 3e-5 of the float64 reference here (README.md, "What done means"); a
# conceptual mistake moves them by 0.1 to 10. The same tolerance holds float64 results, where
# computing inside in float32 and casting back is accepted (with a note), as in every exercise.
LOGITS_TOL = Tolerance(5e-4, 5e-4)
GENERATED = 120          # characters the greedy test generates after its prompt


def windows(seed: int, B: int, L: int) -> torch.Tensor:
    """B windows of L characters of the training text, at places the seed picks: (B, L) int64.

    A window with fewer than ``min(6, L // 2)`` different characters is drawn again (from the same
    generator, so the others stay where they were). The text's tables hold runs of spaces and dashes,
    and over one character repeated every token's value is the same, so attention gives the same
    output whatever it attends to: no mask or cache mistake can show there. One window of 18 in 44
    was such a run, and test_cached_equals_recomputed passed five buggy files at those seeds."""
    gen = inputs.generator(seed)
    starts = torch.randint(0, len(TEXT) - L, (B,), generator=gen).tolist()
    for i in range(B):
        while len(set(TEXT[starts[i]:starts[i] + L])) < min(6, L // 2):
            starts[i] = int(torch.randint(0, len(TEXT) - L, (1,), generator=gen))
    return torch.stack([model_file.encode(TEXT[s:s + L], VOCAB) for s in starts])


@functools.lru_cache(maxsize=None)
def weights_as(dtype: torch.dtype) -> Held:
    """The weights in ``dtype``, sent to each worker once (a call names them: author.Held), 1.6 MB
    that each of a check's 140 calls would otherwise carry; every call still gets its own copy."""
    return Held({k: v.to(dtype) for k, v in WEIGHTS.items()})


def sizes(B: int, L: int, T: int = 0) -> dict[str, int]:
    """Every axis with its size, for naming the axes of a wrong shape (on a tie, the first name wins)."""
    named = {"B": B, "L": L, "V": V, "T+L": T + L, "T": T, "H_kv": CONFIG["n_kv_heads"], "d_head": CONFIG["d_head"],
             "H": CONFIG["n_heads"], "d_model": CONFIG["d_model"]}
    out: dict[str, int] = {}
    for name, size in named.items():
        if size not in out.values():
            out[name] = size
    return out


def call(submission, tokens, cache, *, dtype=torch.float32, device="cpu", **options):
    """model_step(tokens, cache, weights, config) in the worker: (CallResult, logits, the cache as a list of pairs)."""
    with expect.exceptions_named([]):
        result = submission.call(FN, (tokens, [tuple(p) for p in cache], weights_as(dtype), dict(CONFIG)),
                                 device=device, **options)
    value = result.value
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        expect.returns(value, OUTPUTS, FN)          # raises the contract failure that says what came back
    logits = expect.is_tensor(value[0], "logits")
    return result, logits, cache_pairs(value[1])


def cache_pairs(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The returned cache must be a list (or tuple) of n_layers pairs of tensors."""
    hint = (f"Return the cache as a list of {N_LAYERS} pairs, one per layer: [(k_cache, v_cache), ...], each "
            "tensor grown by the new tokens with torch.cat([old, new], dim=2).")
    if not isinstance(cache, (tuple, list)) or len(cache) != N_LAYERS:
        got = f"a {type(cache).__name__} of {len(cache)}" if isinstance(cache, (tuple, list)) else type(cache).__name__
        raise fail("type", f"the returned cache is {got}; expected a list of {N_LAYERS} (k_cache, v_cache) pairs",
                   expected=f"list of {N_LAYERS} pairs", got=got, hint=hint)
    pairs = []
    for i, pair in enumerate(cache):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(isinstance(t, torch.Tensor) for t in pair):
            raise fail("type", f"the returned cache's entry {i} is not a (k_cache, v_cache) pair of tensors",
                       expected="(tensor, tensor)", got=type(pair).__name__, hint=hint)
        pairs.append((pair[0], pair[1]))
    return pairs


def expected(tokens, cache, dtype=torch.float32):
    """The reference's (logits, cache) in float64 from the weights as sent, and its variants."""
    w = {k: v.to(dtype).to(torch.float64) for k, v in WEIGHTS.items()}
    c64 = [(k.to(torch.float64), v.to(torch.float64)) for k, v in cache]
    logits, grown = ref.model_step(tokens, c64, w, CONFIG)

    def variants(which):
        return lambda: mistakes.logits_variants(tokens, c64, w, CONFIG, which=which)
    return logits, grown, variants


def reference_cache(tokens: torch.Tensor, dtype=torch.float32):
    """The reference's cache after ``tokens`` (B, T), rounded to ``dtype``: what a correct earlier step returned."""
    _, grown = ref.model_step(tokens, ref.empty_cache(CONFIG, tokens.shape[0], torch.float64),
                              {k: v.to(torch.float64) for k, v in WEIGHTS.items()}, CONFIG)
    return [(k.to(dtype), v.to(dtype)) for k, v in grown]


def cache_items(got_cache, exp_cache, variants=None, tol=None) -> list[Expected]:
    """One Expected for each layer's k_cache and v_cache; ``variants(which)`` (1: k_cache, 2: v_cache)
    names a mistake on layer 0's."""
    return [Expected(t, e, f"layer {i}'s {name}", CACHE_AXES, variants(1 + j) if variants and i == 0 else None, tol)
            for i, (got, exp) in enumerate(zip(got_cache, exp_cache))
            for j, (t, e, name) in enumerate(zip(got, exp, ("k_cache", "v_cache")))]


def check(submission, tokens, cache, *, dtype=torch.float32, device="cpu", with_cache=False):
    """The learner's logits (and, with_cache, every layer's returned cache) must match the reference's."""
    exp_logits, exp_cache, variants = expected(tokens, cache, dtype)
    result, logits, got_cache = call(submission, tokens, cache, dtype=dtype, device=device)
    B, L = tokens.shape
    T = cache[0][0].shape[2]
    tol = LOGITS_TOL           # float64 too: float32 inside is accepted there (README.md)
    items = [Expected(logits, exp_logits, "logits", ("B", "L", "V"), variants(0), tol)]
    with cache_not_grown(T):
        expect.shapes(cache_items(got_cache, exp_cache), sizes=sizes(B, L, T))
    if with_cache:
        items += cache_items(got_cache, exp_cache, variants, tol)
    expect.tensors(items, sizes=sizes(B, L, T), dtype=dtype, device=device)
    return result, logits, got_cache


class cache_not_grown:
    """Name the mistake of a cache returned without the new tokens (T entries instead of T + L)."""

    def __init__(self, T: int):
        self.T = T

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if isinstance(exc, CheckFailed) and exc.diagnosis.kind == "shape":
            got = list(exc.diagnosis.got or [])
            if len(got) == 4 and got[2] == self.T:
                exc.diagnosis.misconception = "cache-not-grown"
                exc.diagnosis.hint = ("your cache comes back with T entries, as it came in: return each layer's cache "
                                      "grown by the new tokens, torch.cat([k_cache, k], dim=2), T + L entries with the "
                                      "new keys (after RoPE) last.")
        return False


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_signature(submission):
    """model_step has the stub's parameters"""
    expect.signature(submission, FN, PARAMS)


@pytest.mark.group("contract")
def test_returns_logits_and_cache(submission, seed, device):
    """returns (logits, cache), the cache a list of (k_cache, v_cache) per layer"""
    call(submission, windows(seed, 1, 5), ref.empty_cache(CONFIG, 1), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes


@pytest.mark.group("shapes")
def test_shapes(submission, seed, device):
    """logits (B, L, V); each layer's cache grows from T to T + L"""
    prompt = windows(seed, 3, 11)
    cache = reference_cache(prompt[:, :6])
    tokens = prompt[:, 6:]                                                   # (3, 5) after T = 6
    exp_logits, exp_cache, _ = expected(tokens, cache)
    _, logits, got_cache = call(submission, tokens, cache, device=device)
    items = [Expected(logits, exp_logits, "logits", ("B", "L", "V")), *cache_items(got_cache, exp_cache)]
    with cache_not_grown(6):
        expect.shapes(items, sizes=sizes(3, 5, 6))


# -------------------------------------------------------------------------------------------------
# Your model writes text


def text_failure(prompt: str, yours: str, reference: str) -> dict:
    """The diagnosis details that show both texts (src/lumen_ex/feedback/text_diff.py draws them)."""
    first = next((i for i, (a, b) in enumerate(zip(yours, reference)) if a != b), min(len(yours), len(reference)))
    return {"texts": {"prompt": prompt, "yours": yours, "expected": reference, "first_difference": first}}


@functools.lru_cache(maxsize=None)
def reference_text(prompt: str) -> str:
    """The reference's greedy text after ``prompt``, in float64 (kept: a session grades many files)."""
    w64 = {k: v.to(torch.float64) for k, v in WEIGHTS.items()}
    exp_tokens, _ = ref.generate(ref.model_step, model_file.encode(prompt, VOCAB)[None], GENERATED, w64, CONFIG)
    return model_file.decode(exp_tokens[0], VOCAB)


@pytest.mark.group("generation")
def test_greedy_generation(submission, seed, device):
    """greedy generation writes the reference's text"""
    prompt = PROMPTS[seed % len(PROMPTS)]              # consecutive seeds, different prompts
    tokens = model_file.encode(prompt, VOCAB)[None]                                  # (1, L)
    expected_text = reference_text(prompt)
    cache = ref.empty_cache(CONFIG, 1)
    written = []
    for _ in range(GENERATED):
        T = cache[0][0].shape[2]
        _, logits, cache = call(submission, tokens, cache, device=device)
        grown = torch.empty(1, CONFIG["n_kv_heads"], T + tokens.shape[1], CONFIG["d_head"])   # only its shape
        with cache_not_grown(T):
            expect.shapes([Expected(logits, torch.empty(1, tokens.shape[1], V), "logits", ("B", "L", "V")),
                           *cache_items(cache, [(grown, grown)] * N_LAYERS)], sizes=sizes(1, tokens.shape[1], T))
        cache = [(k.detach().to(torch.float32), v.detach().to(torch.float32)) for k, v in cache]
        tokens = logits[:, -1].to(torch.float64).nan_to_num(nan=-1e30).argmax(dim=-1, keepdim=True)   # (1, 1)
        written.append(int(tokens))
    yours = model_file.decode(written, VOCAB)
    if yours == expected_text:
        return
    details = text_failure(prompt, yours, expected_text)
    first = details["texts"]["first_difference"]
    summary = f"your model wrote another text than the reference's from character {first + 1} of {GENERATED} on"
    # Name the mistake from one call that shows every known one: a chunk of new tokens after a cache.
    misconception, hint = None, ("Compare your model_step with the README's steps one by one; the value "
                                 "tests below show which part differs.")
    try:
        chunk = windows(seed + 1, 3, 24)
        check(submission, chunk[:, 20:], reference_cache(chunk[:, :20]), device=device)
    except CheckFailed as exc:
        if exc.diagnosis.misconception:
            misconception, hint = exc.diagnosis.misconception, exc.diagnosis.hint
            details.update({k: v for k, v in exc.diagnosis.details.items() if k.startswith("variant") or
                            k in ("misconception_sentence",)})
    raise fail("values", summary, hint=hint, misconception=misconception, details=details)


# -------------------------------------------------------------------------------------------------
# Values


@pytest.mark.group("values")
def test_prompt_logits(submission, seed, device):
    """the logits of a prompt (empty cache) match the reference"""
    check(submission, windows(seed, 3, 24), ref.empty_cache(CONFIG, 3), device=device)


@pytest.mark.group("values")
def test_chunk_after_cache(submission, seed, device):
    """4 new tokens after 20 cached ones (positions 20 to 23)"""
    text = windows(seed + 2, 3, 24)
    check(submission, text[:, 20:], reference_cache(text[:, :20]), device=device)


@pytest.mark.group("values")
def test_one_token_step(submission, seed, device):
    """one new token after 29 cached ones (a decoding step)"""
    text = windows(seed + 3, 3, 30)
    check(submission, text[:, 29:], reference_cache(text[:, :29]), device=device)


# -------------------------------------------------------------------------------------------------
# The cache


@pytest.mark.group("cache")
def test_cache_entries(submission, seed, device):
    """the returned cache: the old entries, then the new keys (after RoPE) and values"""
    text = windows(seed + 4, 3, 24)
    check(submission, text[:, 20:], reference_cache(text[:, :20]), device=device, with_cache=True)


@pytest.mark.group("cache")
def test_cached_equals_recomputed(submission, seed, device):
    """decoding token by token with your cache gives your own logits of the whole text"""
    text = windows(seed + 5, 1, 18)
    _, whole, _ = call(submission, text, ref.empty_cache(CONFIG, 1), device=device)
    expect.shapes([Expected(whole, torch.empty(1, 18, V), "logits", ("B", "L", "V"))], sizes=sizes(1, 18))
    _, logits, cache = call(submission, text[:, :12], ref.empty_cache(CONFIG, 1), device=device)
    steps = [logits]
    for t in range(12, 18):
        _, logits, cache = call(submission, text[:, t:t + 1], [(k.float(), v.float()) for k, v in cache], device=device)
        expect.shapes([Expected(logits, torch.empty(1, 1, V), "logits", ("B", "L", "V"))], sizes=sizes(1, 1, t))
        steps.append(logits)
    stepped = torch.cat(steps, dim=1).to(torch.float64)                             # (1, 18, V)
    gap = (stepped - whole.to(torch.float64)).abs()
    bad = (gap > LOGITS_TOL.atol + LOGITS_TOL.rtol * whole.to(torch.float64).abs()).any(dim=-1)[0]   # (18,)
    if bool(bad.any()):
        first = int(bad.nonzero()[0])
        raise fail("property", f"your logits for token {first} differ when it comes through the cache "
                   f"(tokens 12 to 17 one per call) from your own logits of the whole text in one call, by up to "
                   f"{float(gap[0, first].max()):.3g}", expected="the same logits either way",
                   got=f"tokens {', '.join(str(int(i)) for i in bad.nonzero()[:, 0])} differ",
                   hint="A token's position is its place in the whole text, T + i (T = k_cache.shape[2]), and it "
                        "attends to every cached token and the new ones up to itself.")


@pytest.mark.group("cache")
def test_caller_cache_unchanged(submission, seed, device):
    """the caller's cache is not modified"""
    text = windows(seed + 6, 2, 9)
    cache = reference_cache(text[:, :6])
    before = [(k.clone(), v.clone()) for k, v in cache]
    result = submission.call(FN, (text[:, 6:], [tuple(p) for p in cache], weights_as(torch.float32), dict(CONFIG)),
                             device=device, echo_args=True)
    after = result.args_after
    if not isinstance(after, tuple) or len(after) != 4:
        raise fail("protocol", "the worker did not send the arguments back after the call")
    pairs = after[1] if isinstance(after[1], (list, tuple)) else []
    for i, (old, now) in enumerate(zip(before, pairs)):
        for name, b, n in zip(("k_cache", "v_cache"), old, now if isinstance(now, (tuple, list)) else ()):
            if not isinstance(n, torch.Tensor) or n.shape != b.shape or not torch.equal(n.to(b.dtype), b):
                raise fail("side-effect", f"model_step changed the caller's layer {i} {name} in place",
                           misconception="caller-cache-mutated",
                           hint="your model_step wrote into the cache it was given, which the caller may still use: "
                                "build new caches with torch.cat([k_cache, k], dim=2), and never write into the ones "
                                "you were given (no slice assignment, .data =, copy_ or other in-place ops).")


# -------------------------------------------------------------------------------------------------
# Dtypes and devices


@pytest.mark.group("dtypes")
def test_float64(submission, seed, device):
    """float64 weights give float64 logits"""
    text = windows(seed + 7, 3, 12)
    check(submission, text[:, 8:], reference_cache(text[:, :8], torch.float64), dtype=torch.float64, device=device)


@pytest.mark.group("dtypes")
def test_runs_on_meta(submission, seed):
    """works on the inputs' device (checked on meta)"""
    text = windows(seed + 8, 3, 12)
    cache = reference_cache(text[:, :8])
    exp_logits, exp_cache, _ = expected(text[:, 8:], cache)
    _, logits, got_cache = call(submission, text[:, 8:], cache, device="meta")
    items = [Expected(logits, exp_logits, "logits", ("B", "L", "V")), *cache_items(got_cache, exp_cache)]
    with cache_not_grown(8):
        expect.tensors(items, sizes=sizes(3, 4, 8), dtype=torch.float32, device="meta")


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    text = windows(seed + 9, 3, 24)
    check(submission, text[:, 20:], reference_cache(text[:, :20]), device=cuda, with_cache=True)
