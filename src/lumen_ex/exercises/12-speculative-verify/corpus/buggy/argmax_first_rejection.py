# bug: finds the first rejection with argmax over ~accepted, which gives 0 when no draft is rejected
# expect-kind: values
# expect-misconception: all-accepted-counted-zero
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    x = draft_tokens.unsqueeze(-1)
    ratio = target_probs[:, :K].gather(-1, x).squeeze(-1) / draft_probs.gather(-1, x).squeeze(-1)
    accepted = uniforms[:, :K] <= ratio.clamp(max=1.0)
    n_accepted = (~accepted).long().argmax(dim=-1)          # index of the first rejection
    residual = (target_probs[:, :K] - draft_probs).clamp(min=0)
    residual = residual / residual.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    dists = torch.cat([residual, target_probs[:, K:]], dim=1)
    chosen = dists[torch.arange(B), n_accepted]
    next_token = (chosen.cumsum(dim=-1) <= uniforms[:, K:]).sum(dim=-1).clamp(max=V - 1)
    return n_accepted, next_token
