# bug: flattens the leading axes with x.view(-1, L, d), which fails on a non-contiguous x
# expect-kind: exception
# expect-misconception: view-not-reshape
# expect-test: test_noncontiguous_inputs

import torch


def rope(x, positions, base=10000.0):
    L, d = x.shape[-2:]
    flat = x.view(-1, L, d)
    inv_freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x0, x1 = flat[..., 0::2], flat[..., 1::2]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
    return out.view(x.shape)
