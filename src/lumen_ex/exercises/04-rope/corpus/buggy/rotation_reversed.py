# bug: the sign of sin is on the wrong line: each pair turns the other way (by -angle)
# expect-kind: values
# expect-misconception: rotation-reversed
# expect-test: test_values[4d]

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos + x1 * sin, x1 * cos - x0 * sin], dim=-1).flatten(-2)
