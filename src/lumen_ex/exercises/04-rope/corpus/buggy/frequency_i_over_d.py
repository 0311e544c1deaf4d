# bug: frequencies base ** (-i / d) with i = 0 .. d/2 - 1: the 2 of the exponent 2i/d is missing
# expect-kind: values
# expect-misconception: exponent-i-over-d
# expect-test: test_values[4d]

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    i = torch.arange(d // 2, device=x.device, dtype=torch.float64)
    inv_freq = base ** (-i / d)
    angles = positions.double()[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
