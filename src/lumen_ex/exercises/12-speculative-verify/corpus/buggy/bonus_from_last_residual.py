# bug: clamps the stopping position to K - 1 to index the K residuals, so a sequence with every draft accepted samples from the residual at K - 1 instead of target_probs[b, K]
# expect-kind: values
# expect-misconception: no-bonus-token
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    x = draft_tokens.unsqueeze(-1)
    ratio = target_probs[:, :K].gather(-1, x).squeeze(-1) / draft_probs.gather(-1, x).squeeze(-1)
    accepted = uniforms[:, :K] <= ratio.clamp(max=1.0)
    n_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)
    residual = (target_probs[:, :K] - draft_probs).clamp(min=0)
    residual = residual / residual.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    at = n_accepted.clamp(max=K - 1)                    # "residual has only K rows"
    chosen = residual[torch.arange(B), at]
    next_token = (chosen.cumsum(dim=-1) <= uniforms[:, K:]).sum(dim=-1).clamp(max=V - 1)
    return n_accepted, next_token
