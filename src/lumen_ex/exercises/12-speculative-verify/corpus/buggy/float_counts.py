# bug: counts the accepted prefix with a float cumprod, so n_accepted comes back float32, not int64
# expect-kind: dtype
# expect-misconception: counts-not-int64
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    x = draft_tokens.unsqueeze(-1)
    ratio = target_probs[:, :K].gather(-1, x).squeeze(-1) / draft_probs.gather(-1, x).squeeze(-1)
    accepted = (uniforms[:, :K] <= ratio.clamp(max=1.0)).float()
    n_accepted = accepted.cumprod(dim=-1).sum(dim=-1)
    residual = (target_probs[:, :K] - draft_probs).clamp(min=0)
    residual = residual / residual.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    dists = torch.cat([residual, target_probs[:, K:]], dim=1)
    chosen = dists[torch.arange(B), n_accepted.long()]
    next_token = (chosen.cumsum(dim=-1) <= uniforms[:, K:]).sum(dim=-1).clamp(max=V - 1)
    return n_accepted, next_token
