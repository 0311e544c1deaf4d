# bug: the output buffer is torch.zeros(x.shape, device=x.device) without dtype=: float32 whatever x is
# expect-kind: dtype
# expect-misconception: new-tensor-dtype
# expect-test: test_dtype[float64]

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    out = torch.zeros(x.shape, device=x.device)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
