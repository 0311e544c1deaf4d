"""Reference for exercise 12: verifying K drafted tokens in speculative sampling.

Shapes: B sequences, K drafted tokens per sequence, V the vocabulary. draft_probs[b, i] is the
draft model's distribution at draft position i (the one draft_tokens[b, i] was sampled from),
target_probs[b, i] the target model's at the same position, and target_probs[b, K] the target's
distribution after all K drafts. uniforms[b, i] (i < K) decides draft i; uniforms[b, K] samples the
one token the target adds.

Inverse-CDF sampling from a distribution ``probs`` (V,) with a uniform ``u``: the smallest index j
with cumsum(probs)[j] > u. The decisions are made in float64 on the values as given, whatever their
dtype; the counts and tokens are int64.
"""

from __future__ import annotations

import torch


def inverse_cdf(probs, u):
    """probs (..., V) rows that sum to 1, u (...,) in [0, 1) -> (...,) int64: the smallest j with
    cumsum(probs)[j] > u. (Counting the boundaries at or below u gives exactly that index.)"""
    cdf = probs.cumsum(dim=-1)                                          # (..., V)
    index = (cdf <= u.unsqueeze(-1)).sum(dim=-1)                        # (...,)
    return index.clamp(max=probs.shape[-1] - 1)                         # u never reaches the last boundary


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    """Accept a prefix of the K drafted tokens of each sequence and sample the token after it.

    draft_tokens (B, K) int64, draft_probs (B, K, V), target_probs (B, K + 1, V), uniforms (B, K + 1).
    Returns n_accepted (B,) int64, the number of drafts accepted before the first rejection, and
    next_token (B,) int64: sampled from norm(max(0, p - q)) at the first rejection, or from
    target_probs[b, K] when all K drafts are accepted.
    """
    B, K, V = draft_probs.shape
    q = draft_probs.to(torch.float64)                                   # (B, K, V)
    p = target_probs.to(torch.float64)                                  # (B, K + 1, V)
    u = uniforms.to(torch.float64)                                      # (B, K + 1)

    # 1. accept draft i iff u_i <= min(1, p(x) / q(x)), x = draft_tokens[b, i]
    x = draft_tokens.unsqueeze(-1)                                      # (B, K, 1)
    p_x = p[:, :K].gather(-1, x).squeeze(-1)                            # (B, K)
    q_x = q.gather(-1, x).squeeze(-1)                                   # (B, K)
    accepted = u[:, :K] <= torch.clamp(p_x / q_x, max=1.0)              # (B, K)

    # 2. the accepted prefix stops at the first rejection
    n_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)            # (B,)

    # 3. the distribution of the next token: the residual at the first rejection, else the target at K
    residual = torch.clamp(p[:, :K] - q, min=0.0)                       # (B, K, V)
    mass = residual.sum(dim=-1, keepdim=True)                           # (B, K, 1), > 0 where a draft is rejected
    residual = residual / mass.clamp_min(torch.finfo(torch.float64).tiny)
    dists = torch.cat([residual, p[:, K:]], dim=1)                      # (B, K + 1, V)
    chosen = dists[torch.arange(B, device=dists.device), n_accepted]    # (B, V)

    # 4. inverse-CDF sampling with the last uniform
    next_token = inverse_cdf(chosen, u[:, K])                           # (B,)
    return n_accepted, next_token
