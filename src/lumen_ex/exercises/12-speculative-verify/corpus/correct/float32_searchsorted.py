# float32 inside (the probabilities upcast, as serving code does for the acceptance test), the
# ratio compared as u * q <= p (no division), the first rejection found with argmax on a padded
# mask, and torch.searchsorted(right=True) as the inverse CDF over an un-normalised residual
# (its cumulative sum compared with u times its total).
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    p = target_probs.float()
    q = draft_probs.float()
    u = uniforms.float()
    idx = draft_tokens.unsqueeze(-1)
    p_x = torch.gather(p[:, :K], 2, idx)[..., 0]
    q_x = torch.gather(q, 2, idx)[..., 0]
    rejected = u[:, :K] * q_x > p_x                       # u > p/q, with q > 0
    padded = torch.cat([rejected, torch.ones_like(rejected[:, :1])], dim=1)
    n_accepted = padded.int().argmax(dim=1).long()        # the first True; K when only the pad is
    residual = (p[:, :K] - q).clamp(min=0)
    weights = torch.cat([residual, p[:, K:]], dim=1)      # (B, K + 1, V), unnormalised rows
    w = weights[torch.arange(B, device=p.device), n_accepted]
    cdf = w.cumsum(dim=-1)
    target = (u[:, K] * cdf[:, -1]).unsqueeze(-1)
    next_token = torch.searchsorted(cdf.contiguous(), target.contiguous(), right=True)[:, 0]
    return n_accepted, next_token.clamp(max=V - 1).long()
