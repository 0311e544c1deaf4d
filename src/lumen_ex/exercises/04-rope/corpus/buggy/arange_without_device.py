# bug: the frequencies come from torch.arange(0, d, 2) without device=: on another device than the CPU they meet positions and torch raises
# expect-kind: exception
# expect-misconception: new-tensor-device
# expect-test: test_runs_on_meta

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
