# The acceptance test in log space, log u <= log p - log q, n_accepted from a cumulative minimum,
# and the inverse CDF as a count of the residual's boundaries at or below u. Each sequence's
# distribution is chosen with torch.where rather than an index.
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    p = target_probs.to(torch.float64)
    q = draft_probs.to(torch.float64)
    u = uniforms.to(torch.float64)
    onehot = torch.nn.functional.one_hot(draft_tokens, V).to(torch.float64)
    log_ratio = torch.log((p[:, :K] * onehot).sum(-1)) - torch.log((q * onehot).sum(-1))
    accepted = torch.log(u[:, :K]) <= log_ratio                                 # log 0 = -inf accepts
    n_accepted = accepted.long().cummin(dim=-1).values.sum(dim=-1)
    residual = (p[:, :K] - q).clamp(min=0)
    residual = residual / residual.sum(-1, keepdim=True).clamp_min(1e-300)
    position = torch.arange(K + 1, device=p.device)
    pick = (position[None, :] == n_accepted[:, None]).to(torch.float64)        # (B, K + 1) one-hot
    dists = torch.cat([residual, p[:, K:]], dim=1)
    chosen = torch.einsum("bk,bkv->bv", pick, dists)
    next_token = (chosen.cumsum(-1) <= u[:, K, None]).long().sum(-1).clamp(max=V - 1)
    return n_accepted, next_token
