# bug: a loop that fills next_token only when it breaks on a rejection, so sequences with every draft accepted keep the placeholder 0
# expect-kind: values
# expect-misconception: no-bonus-token
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    n_accepted = torch.zeros(B, dtype=torch.long)
    next_token = torch.zeros(B, dtype=torch.long)
    for b in range(B):
        for i in range(K):
            x = draft_tokens[b, i]
            if uniforms[b, i] <= target_probs[b, i, x] / draft_probs[b, i, x]:
                n_accepted[b] += 1
                continue
            residual = torch.clamp(target_probs[b, i] - draft_probs[b, i], min=0)
            cdf = torch.cumsum(residual / residual.sum(), dim=0)
            next_token[b] = int((cdf <= uniforms[b, K]).sum().clamp(max=V - 1))
            break
    return n_accepted, next_token
