# bug: samples the next token from max(0, p - q) without dividing by its sum
# expect-kind: values
# expect-misconception: residual-not-normalised
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    x = draft_tokens.unsqueeze(-1)
    ratio = target_probs[:, :K].gather(-1, x).squeeze(-1) / draft_probs.gather(-1, x).squeeze(-1)
    accepted = uniforms[:, :K] <= ratio.clamp(max=1.0)
    n_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)
    residual = torch.relu(target_probs[:, :K] - draft_probs)
    dists = torch.cat([residual, target_probs[:, K:]], dim=1)
    chosen = dists[torch.arange(B), n_accepted]
    next_token = (chosen.cumsum(dim=-1) <= uniforms[:, K:]).sum(dim=-1).clamp(max=V - 1)
    return n_accepted, next_token
