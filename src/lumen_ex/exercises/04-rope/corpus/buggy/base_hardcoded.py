# bug: the frequencies use a hard-coded 10000 instead of the base argument
# expect-kind: values
# expect-misconception: base-ignored
# expect-test: test_base[500]

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
