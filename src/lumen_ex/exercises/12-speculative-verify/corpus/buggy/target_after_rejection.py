# bug: after rejecting draft i samples from the target's own distribution target_probs[b, i] instead of the residual
# expect-kind: values
# expect-misconception: target-not-residual
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    n_accepted = torch.full((B,), K, dtype=torch.long)
    for b in range(B):
        for i in range(K):
            x = draft_tokens[b, i]
            if uniforms[b, i] > min(1.0, float(target_probs[b, i, x] / draft_probs[b, i, x])):
                n_accepted[b] = i
                break
    # the target's distribution at the stopping position: row n of target_probs (row K for the bonus)
    chosen = target_probs[torch.arange(B), n_accepted]
    next_token = (chosen.cumsum(dim=-1) <= uniforms[:, K:]).sum(dim=-1).clamp(max=V - 1)
    return n_accepted, next_token
