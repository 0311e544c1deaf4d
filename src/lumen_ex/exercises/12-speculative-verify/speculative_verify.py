"""Exercise 12: verifying drafted tokens in speculative decoding. Read README.md in this folder first."""

import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    """Accept a prefix of each sequence's K drafted tokens and sample the one token after it.

    draft_tokens: (B, K) int64, the tokens the draft model proposed.
    draft_probs: (B, K, V), the draft's distribution at each drafted position (draft_tokens[b, i] ~ draft_probs[b, i]).
    target_probs: (B, K + 1, V), the target's distributions at the same K positions, and one more after them.
    uniforms: (B, K + 1) in [0, 1): uniforms[b, i] decides draft i, uniforms[b, K] samples the next token.
    Returns (n_accepted, next_token), both (B,) int64: the number of drafts accepted before the first
    rejection, and the token sampled after them (from the residual at the first rejection, or from
    target_probs[b, K] when all K are accepted), by inverse CDF: the smallest j with cumsum(probs)[j] > u.
    """
    # TODO: accept draft i iff uniforms[b, i] <= min(1, p(x) / q(x)), x = draft_tokens[b, i],
    #       p = target_probs[b, i], q = draft_probs[b, i].
    # TODO: n_accepted: the drafts accepted before the first rejection (K when none is rejected).
    # TODO: the next token's distribution: norm(max(0, p - q)) at the first rejection, else target_probs[b, K].
    # TODO: sample it with uniforms[b, K] by inverse CDF; return (n_accepted, next_token) as int64.
    raise NotImplementedError("speculative_verify is not written yet")
