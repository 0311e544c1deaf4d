# bug: computes the frequencies and angles in x's dtype: for float16 and bfloat16 an angle of 2049 radians is rounded to 2048
# expect-kind: values
# expect-misconception: angles-in-low-precision
# expect-test: test_dtype[float16]

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d))
    angles = positions.to(x.dtype)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
