# bug: a cos/sin table precomputed for positions 0 .. 2047 and indexed with positions: fails past 2047
# expect-kind: exception
# expect-misconception: table-too-short
# expect-test: test_large_positions

import torch

MAX_SEQ_LEN = 2048


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d))
    t = torch.arange(MAX_SEQ_LEN, device=x.device, dtype=torch.float64)
    freqs = torch.outer(t, inv_freq)
    cos = freqs.cos().to(x.dtype)[positions]
    sin = freqs.sin().to(x.dtype)[positions]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
