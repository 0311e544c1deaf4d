# bug: only samples a next token after a rejection: sequences whose K drafts are all accepted get -1, no bonus token
# expect-kind: values
# expect-misconception: no-bonus-token
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    x = draft_tokens.unsqueeze(-1)
    ratio = target_probs[:, :K].gather(-1, x).squeeze(-1) / draft_probs.gather(-1, x).squeeze(-1)
    accepted = uniforms[:, :K] <= ratio.clamp(max=1.0)
    n_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)
    next_token = torch.full((B,), -1, dtype=torch.long)
    rejected = n_accepted < K
    rows = torch.arange(B)[rejected]
    at = n_accepted[rejected]
    residual = (target_probs[rows, at] - draft_probs[rows, at]).clamp(min=0)
    residual = residual / residual.sum(dim=-1, keepdim=True)
    next_token[rejected] = (residual.cumsum(dim=-1) <= uniforms[rows, K:]).sum(dim=-1).clamp(max=V - 1)
    return n_accepted, next_token
