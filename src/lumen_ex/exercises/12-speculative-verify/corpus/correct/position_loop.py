# A loop over the K draft positions, vectorised over the batch: a mask of the sequences still
# accepting, and the next token filled in where a sequence stops.
import torch


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    B, K, V = draft_probs.shape
    p = target_probs.double()
    q = draft_probs.double()
    u = uniforms.double()
    rows = torch.arange(B, device=draft_tokens.device)
    n_accepted = torch.zeros(B, dtype=torch.long, device=draft_tokens.device)
    next_token = torch.zeros(B, dtype=torch.long, device=draft_tokens.device)
    running = torch.ones(B, dtype=torch.bool, device=draft_tokens.device)
    for i in range(K):
        x = draft_tokens[:, i]
        ratio = p[rows, i, x] / q[rows, i, x]
        ok = u[:, i] <= torch.clamp(ratio, max=1.0)
        stop = running & ~ok
        residual = torch.clamp(p[:, i] - q[:, i], min=0.0)
        residual = residual / residual.sum(dim=-1, keepdim=True).clamp_min(1e-300)
        token = (residual.cumsum(dim=-1) <= u[:, K:]).sum(dim=-1).clamp(max=V - 1)
        next_token = torch.where(stop, token, next_token)
        n_accepted = n_accepted + (running & ok).long()
        running = running & ok
    bonus = (p[:, K].cumsum(dim=-1) <= u[:, K:]).sum(dim=-1).clamp(max=V - 1)
    next_token = torch.where(running, bonus, next_token)
    return n_accepted, next_token
