"""Known mistakes of exercise 12 (speculative_verify), computed in float64 on a test's own inputs.

``verify`` is the reference with knobs: each known mistake is exactly one knob turned away from the
right answer, so a learner's (n_accepted, next_token) that equals a knob's is named by it. The
suite asks for the variants of n_accepted (``which=N_ACCEPTED``) or of next_token
(``which=NEXT_TOKEN``: only the mistakes whose n_accepted is the right one on this input, since the
next token is checked after the counts are right).
"""

from __future__ import annotations

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant

N_ACCEPTED, NEXT_TOKEN = 0, 1


def _sample(probs, u):
    """Inverse CDF: the smallest j with cumsum(probs)[j] > u (V when u is past the row's total)."""
    return (probs.cumsum(dim=-1) <= u.unsqueeze(-1)).sum(dim=-1)                   # (...,)


def verify(draft_tokens, draft_probs, target_probs, uniforms, *, ratio: str = "p/q", shift: int = 0,
           count: str = "prefix", normalise: bool = True, after_reject: str = "residual",
           bonus: str = "target", uniform: str = "last") -> tuple[torch.Tensor, torch.Tensor]:
    """(n_accepted, next_token), both (B,) int64, with one knob turned:

    ratio: "p/q" (right) or "q/p" (inverted). shift: 1 compares draft i with target_probs[b, i + 1]
    (for its ratio and its residual). count: "prefix" (right), "sum" (every accepted draft counted,
    also after the first rejection; the next token then comes from that position), "argmax" (the
    first rejection found with argmax, which says 0 when there is none). normalise: False samples
    from max(0, p - q) as it is. after_reject: "target" samples from target_probs[b, i] after
    rejecting draft i. bonus, when all K drafts are accepted: "target" (right: target_probs[b, K]),
    "none" (-1, no token), "zero" (0, a placeholder), "last-residual" (the residual at K - 1),
    "last-target" (target_probs[b, K - 1]). uniform: "same" samples after a rejection with the
    rejecting draft's own uniform.
    """
    B, K, V = draft_probs.shape
    q = draft_probs.to(torch.float64)                                               # (B, K, V)
    p = target_probs.to(torch.float64)                                              # (B, K + 1, V)
    u = uniforms.to(torch.float64)                                                  # (B, K + 1)
    p_at = p[:, shift:K + shift]                                                    # (B, K, V): compared with q
    x = draft_tokens.unsqueeze(-1)                                                  # (B, K, 1)
    p_x, q_x = p_at.gather(-1, x).squeeze(-1), q.gather(-1, x).squeeze(-1)         # (B, K)
    r = p_x / q_x if ratio == "p/q" else q_x / p_x
    accepted = u[:, :K] <= torch.clamp(r, max=1.0)                                  # (B, K)
    all_in = accepted.all(dim=-1)                                                   # (B,)
    if count == "sum":
        n = accepted.long().sum(dim=-1)
    elif count == "argmax":
        n = (~accepted).long().argmax(dim=-1)                                       # 0 when nothing is rejected
    else:
        n = accepted.long().cumprod(dim=-1).sum(dim=-1)                             # (B,)

    residual = torch.clamp(p_at - q, min=0.0)                                       # (B, K, V)
    if normalise:
        residual = residual / residual.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    after = residual if after_reject == "residual" else p[:, :K]                    # (B, K, V)
    rows = torch.arange(B)
    at = n.clamp(max=K - 1)                                                         # (B,)
    u_next = u[rows, n] if uniform == "same" else u[:, K]                           # (B,)
    token = _sample(after[rows, at], u_next)                                        # (B,): where n < K
    if bonus == "last-residual":
        extra = _sample(residual[:, K - 1], u[:, K])
    elif bonus == "last-target":
        extra = _sample(p[:, K - 1], u[:, K])
    else:
        extra = _sample(p[:, K], u[:, K])                                           # (B,)
    if bonus == "none":
        extra = torch.full_like(extra, -1)
    elif bonus == "zero":
        extra = torch.zeros_like(extra)
    next_token = torch.where(n == K, extra, token)
    if count == "argmax":
        next_token = torch.where(all_in, token, next_token)                         # n = 0: sampled at position 0
    return n, next_token


# (id, sentence about n_accepted, sentence about next_token, fix, knobs)
CANDIDATES = [
    ("ratio-inverted",
     "your n_accepted equals acceptance with the ratio upside down, u <= min(1, q(x) / p(x))",
     "your next_token equals the one after acceptance with the ratio upside down, u <= min(1, q(x) / p(x))",
     "accept draft x iff uniforms[b, i] <= min(1, target_probs[b, i, x] / draft_probs[b, i, x]): the target's "
     "probability over the draft's, so a token the target likes more than the draft is always kept",
     dict(ratio="q/p")),
    ("continued-after-rejection",
     "your n_accepted counts every accepted draft, also the ones after the first rejection",
     "your next_token is sampled at the position your count of all accepted drafts points to",
     "the accepted drafts are a prefix: stop at the first rejection (accepted.long().cumprod(-1).sum(-1)); the "
     "drafts after it were proposed after a token the target has just refused", dict(count="sum")),
    ("target-shifted",
     "your n_accepted equals acceptance that compares draft i with the target's distribution at i + 1",
     "your next_token equals the one drawn after comparing draft i with the target's distribution at i + 1",
     "target_probs[b, i] and draft_probs[b, i] are the two models' distributions at the same position, the "
     "one draft_tokens[b, i] was drawn at; target_probs[b, K], the extra one, is only for the bonus token",
     dict(shift=1)),
    ("all-accepted-counted-zero",
     "your n_accepted is 0 where all K drafts are accepted",
     "your next_token is sampled at position 0 where all K drafts are accepted",
     "argmax over the rejections returns 0 when there is no rejection: count the accepted prefix instead, "
     "accepted.long().cumprod(-1).sum(-1), which gives K when every draft is accepted", dict(count="argmax")),
    ("residual-not-normalised", None,
     "your next_token after a rejection is drawn from max(0, p - q) without dividing it by its sum",
     "max(0, p - q) sums to less than 1: divide it by its sum before the cumulative sum (or compare its "
     "cumulative sum with u * sum)", dict(normalise=False)),
    ("target-not-residual", None,
     "your next_token after rejecting draft i is drawn from the target's distribution target_probs[b, i], not "
     "from the residual",
     "after a rejection sample from norm(max(0, target_probs[b, i] - draft_probs[b, i])): the draft has already "
     "proposed its share of p, and sampling p again would count that share twice",
     dict(after_reject="target")),
    ("acceptance-uniform-reused", None,
     "your next_token after rejecting draft i is sampled with that draft's own uniform uniforms[b, i], not "
     "uniforms[b, K]",
     "uniforms[b, i] decided the rejection, so it is known to lie above the ratio and is no longer uniform: sample "
     "the next token with the fresh uniforms[b, K]", dict(uniform="same")),
    ("no-bonus-token", None,
     "your next_token is -1 (no token) where all K drafts are accepted",
     "when all K drafts are accepted the target still adds a token for free: sample it from target_probs[b, K] "
     "with uniforms[b, K]", dict(bonus="none")),
    ("no-bonus-token", None,
     "your next_token is 0 (a placeholder) where all K drafts are accepted",
     "when all K drafts are accepted the target still adds a token for free: sample it from target_probs[b, K] "
     "with uniforms[b, K]", dict(bonus="zero")),
    ("no-bonus-token", None,
     "your next_token where all K drafts are accepted is drawn from the residual at the last draft, K - 1, not "
     "from target_probs[b, K]",
     "no draft was rejected, so there is no residual: the bonus token comes from the target's extra "
     "distribution target_probs[b, K]", dict(bonus="last-residual")),
    ("no-bonus-token", None,
     "your next_token where all K drafts are accepted is drawn from target_probs[b, K - 1], not target_probs[b, K]",
     "target_probs[b, K - 1] belongs to the last draft, which was accepted; the bonus token comes from the "
     "distribution after it, target_probs[b, K]", dict(bonus="last-target")),
]

def all_outcomes(draft_tokens, draft_probs, target_probs, uniforms) -> list[tuple[str, dict, tuple]]:
    """(id, knobs, (n_accepted, next_token)) of every known mistake on these inputs."""
    args = (draft_tokens, draft_probs, target_probs, uniforms)
    return [(ident, knobs, verify(*args, **knobs)) for ident, _, _, _, knobs in CANDIDATES]


def verify_variants(draft_tokens, draft_probs, target_probs, uniforms, *, which: int) -> list[Variant]:
    """The known wrong answers for n_accepted (which=N_ACCEPTED) or next_token (which=NEXT_TOKEN)."""
    args = (draft_tokens, draft_probs, target_probs, uniforms)
    right_n, _ = verify(*args)
    found = []
    for ident, n_sentence, next_sentence, fix, knobs in CANDIDATES:
        n, nxt = verify(*args, **knobs)
        if which == N_ACCEPTED and n_sentence is not None:
            found.append(Variant(ident, n_sentence, n, fix))
        elif which == NEXT_TOKEN and torch.equal(n, right_n):
            found.append(Variant(ident, next_sentence, nxt, fix))
    return found


# Every mistake this suite names, by id, with the sentence shown to the learner. Value ids come from
# the variants above (matched on values); the others from the check that catches them.
CATALOGUE: dict[str, str] = {
    # accepting the drafts
    "ratio-inverted": "a draft accepted with u <= min(1, q/p) instead of min(1, p/q)",
    "continued-after-rejection": "drafts after the first rejection still counted as accepted",
    "target-shifted": "draft i compared with the target's distribution at i + 1 instead of i",
    "all-accepted-counted-zero": "n_accepted is 0 when no draft is rejected (argmax over an all-False tensor)",
    # the token after them
    "residual-not-normalised": "after a rejection, sampled from max(0, p - q) without dividing by its sum",
    "target-not-residual": "after a rejection, sampled from the target's distribution instead of the residual",
    "acceptance-uniform-reused": "after a rejection, sampled with the rejecting draft's uniform instead of uniforms[b, K]",
    "no-bonus-token": "no token (or the wrong one) sampled from target_probs[b, K] when all K drafts are accepted",
    # what came back, and the caller's tensors
    "counts-not-int64": "n_accepted or next_token returned with another dtype than int64",
    "argument-mutated": "a probability tensor or the uniforms changed in place",
    **GENERIC_MISCONCEPTIONS,
}
