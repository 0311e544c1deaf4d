# bug: precomputes cos/sin for positions 0 .. 8191 and slices the table [:L] instead of indexing it with positions
# expect-kind: values
# expect-misconception: positions-ignored
# expect-test: test_decode_single_token

import torch

MAX_LEN = 8192


def rope(x, positions, base=10000.0):
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(MAX_LEN, device=x.device, dtype=torch.float64)
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    table = torch.outer(t, inv_freq)
    cos = table.cos()[:L].to(x.dtype)
    sin = table.sin()[:L].to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
