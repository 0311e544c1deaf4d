# bug: writes the rotated pairs back into x[..., 0::2] and x[..., 1::2] and returns x: the caller's tensor is changed
# expect-kind: side-effect
# expect-misconception: inputs-modified
# expect-test: test_inputs_unchanged

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x0, x1 = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = x0 * cos - x1 * sin
    x[..., 1::2] = x0 * sin + x1 * cos
    return x
