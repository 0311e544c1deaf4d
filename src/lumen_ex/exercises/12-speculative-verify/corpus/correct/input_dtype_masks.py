# Vectorised in the inputs' own dtype (half precision included): u * q <= p instead of a division,
# a one-hot mask of the first rejection picks that position's residual with a sum over K, the bonus
# row is added where nothing is rejected, and the un-normalised row is sampled against u times its total.
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    idx = draft_tokens[..., None]
    p_x = torch.take_along_dim(target_probs[:, :K], idx, dim=-1)[..., 0]         # (B, K)
    q_x = torch.take_along_dim(draft_probs, idx, dim=-1)[..., 0]                  # (B, K)
    accepted = uniforms[:, :K] * q_x <= p_x
    stopped = torch.cumsum(~accepted, dim=-1) > 0                                 # from the first rejection on
    n_accepted = (~stopped).sum(dim=-1)
    before = torch.cat([torch.zeros_like(stopped[:, :1]), stopped[:, :-1]], dim=1)
    first = stopped & ~before                                                     # (B, K) one-hot, or all False
    residual = torch.clamp(target_probs[:, :K] - draft_probs, min=0)
    dist = (residual * first[..., None]).sum(dim=1)                               # (B, V)
    dist = dist + target_probs[:, K] * (n_accepted == K)[:, None]
    cdf = dist.cumsum(dim=-1)
    next_token = (cdf <= uniforms[:, K:] * cdf[:, -1:]).sum(dim=-1).clamp(max=V - 1)
    return n_accepted, next_token
