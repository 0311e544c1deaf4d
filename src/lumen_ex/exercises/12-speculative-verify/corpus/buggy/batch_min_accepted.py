# bug: keeps the batch's fewest accepted drafts for every sequence (a batch-synchronous verify); with one draft token this gives what argmax without a rejection gives, so that lone match must not lead the feedback
# expect-kind: property
# expect-test: test_emits_target_distribution
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    idx = draft_tokens.unsqueeze(-1)
    qx = draft_probs.gather(-1, idx).squeeze(-1)
    px = target_probs[:, :K].gather(-1, idx).squeeze(-1)
    accepted = uniforms[:, :K] <= torch.clamp(px / qx, max=1.0)
    n = accepted.long().cumprod(-1).sum(-1)
    n = n.min().expand(B).clone()
    resid = torch.clamp(target_probs[:, :K] - draft_probs, min=0)
    resid = resid / resid.sum(-1, keepdim=True).clamp_min(1e-30)
    dists = torch.cat([resid, target_probs[:, K:K + 1]], dim=1)
    dist = dists[torch.arange(B), n]
    tok = (dist.cumsum(-1) <= uniforms[:, K:K + 1]).sum(-1).clamp(max=V - 1)
    return n.long(), tok.long()
