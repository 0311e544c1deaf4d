# bug: samples the next token with the uniform of the position it stopped at, uniforms[b, n], which for a rejection is the very uniform that rejected the draft
# expect-kind: values
# expect-misconception: acceptance-uniform-reused
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    x = draft_tokens.unsqueeze(-1)
    ratio = target_probs[:, :K].gather(-1, x).squeeze(-1) / draft_probs.gather(-1, x).squeeze(-1)
    accepted = uniforms[:, :K] <= ratio.clamp(max=1.0)
    n_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)
    residual = (target_probs[:, :K] - draft_probs).clamp(min=0)
    residual = residual / residual.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    dists = torch.cat([residual, target_probs[:, K:]], dim=1)
    rows = torch.arange(B)
    chosen = dists[rows, n_accepted]
    u = uniforms[rows, n_accepted]                       # "the uniform of this position"
    next_token = (chosen.cumsum(dim=-1) <= u[:, None]).sum(dim=-1).clamp(max=V - 1)
    return n_accepted, next_token
