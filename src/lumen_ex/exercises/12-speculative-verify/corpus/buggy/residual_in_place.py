# bug: builds the residual in place on a slice of target_probs (sub_, clamp_, div_), which writes into the caller's tensor
# expect-kind: side-effect
# expect-misconception: argument-mutated
# expect-test: test_inputs_unchanged
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    x = draft_tokens.unsqueeze(-1)
    ratio = target_probs[:, :K].gather(-1, x).squeeze(-1) / draft_probs.gather(-1, x).squeeze(-1)
    accepted = uniforms[:, :K] <= ratio.clamp(max=1.0)
    n_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)
    residual = target_probs[:, :K]                      # a view: no copy is made
    residual.sub_(draft_probs).clamp_(min=0)
    residual.div_(residual.sum(dim=-1, keepdim=True).clamp_min(1e-30))
    dists = torch.cat([residual, target_probs[:, K:]], dim=1)
    chosen = dists[torch.arange(B), n_accepted]
    next_token = (chosen.cumsum(dim=-1) <= uniforms[:, K:]).sum(dim=-1).clamp(max=V - 1)
    return n_accepted, next_token
