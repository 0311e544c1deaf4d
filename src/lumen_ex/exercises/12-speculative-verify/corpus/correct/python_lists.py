# Plain Python over lists, one sequence at a time, with an early break at the first rejection;
# the inverse CDF walks the running sum. Only the results become tensors.
import torch


def _inverse_cdf(weights, u):
    total = sum(weights)
    running = 0.0
    for j, w in enumerate(weights):
        running += w / total
        if running > u:
            return j
    return len(weights) - 1


def speculative_verify(draft_tokens, draft_probs, target_probs, uniforms):
    tokens = draft_tokens.tolist()
    q = draft_probs.double().tolist()
    p = target_probs.double().tolist()
    u = uniforms.double().tolist()
    K = len(tokens[0])
    counts, nexts = [], []
    for b in range(len(tokens)):
        n = 0
        dist = p[b][K]
        for i in range(K):
            x = tokens[b][i]
            if u[b][i] <= min(1.0, p[b][i][x] / q[b][i][x]):
                n += 1
            else:
                dist = [max(0.0, a - c) for a, c in zip(p[b][i], q[b][i])]
                break
        counts.append(n)
        nexts.append(_inverse_cdf(dist, u[b][K]))
    device = draft_tokens.device
    return (torch.tensor(counts, dtype=torch.int64, device=device),
            torch.tensor(nexts, dtype=torch.int64, device=device))
