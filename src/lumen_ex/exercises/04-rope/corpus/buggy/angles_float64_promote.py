# bug: cos and sin are float64 (arange with dtype=torch.float64) and never cast to x's dtype: float32 x gets a float64 result
# expect-kind: dtype
# expect-misconception: dtype-upcast
# expect-test: test_values[4d]

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angles = positions[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
