# bug: accepts a draft with u <= min(1, q(x) / p(x)), the draft's probability over the target's
# expect-kind: values
# expect-misconception: ratio-inverted
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    x = draft_tokens.unsqueeze(-1)
    p_x = target_probs[:, :K].gather(-1, x).squeeze(-1)
    q_x = draft_probs.gather(-1, x).squeeze(-1)
    accepted = uniforms[:, :K] <= torch.clamp(q_x / p_x, max=1.0)
    n_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)
    residual = torch.clamp(target_probs[:, :K] - draft_probs, min=0)
    residual = residual / residual.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    dists = torch.cat([residual, target_probs[:, K:]], dim=1)
    chosen = dists[torch.arange(B), n_accepted]
    next_token = (chosen.cumsum(dim=-1) <= uniforms[:, K:]).sum(dim=-1).clamp(max=V - 1)
    return n_accepted, next_token
