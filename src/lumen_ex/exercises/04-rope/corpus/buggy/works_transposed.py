# bug: works on x transposed to (..., d, L) to line it up with a (d/2, L) angle table, and returns it that way
# expect-kind: shape
# expect-misconception: axes-transposed
# expect-test: test_shapes[4d]

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angles = inv_freq[:, None] * positions.double()[None, :]         # (d/2, L)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    xt = x.transpose(-2, -1)                                         # (..., d, L)
    x0, x1 = xt[..., 0::2, :], xt[..., 1::2, :]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-2).flatten(-3, -2)
