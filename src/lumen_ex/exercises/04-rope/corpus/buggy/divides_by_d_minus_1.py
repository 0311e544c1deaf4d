# bug: exponents 2i / (d - 1) instead of 2i / d
# expect-kind: values
# expect-misconception: exponent-over-d-minus-1
# expect-test: test_values[4d]

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    i = torch.arange(d // 2, device=x.device, dtype=torch.float64)
    inv_freq = base ** (-2 * i / (d - 1))
    angles = positions.double()[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
