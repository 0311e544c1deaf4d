# bug: wraps the whole rotation in torch.no_grad() ("positions need no gradient"): the output is cut off from x
# expect-kind: property
# expect-misconception: no-gradient
# expect-test: test_gradients_flow

import torch


def rope(x, positions, base=10000.0):
    with torch.no_grad():
        d = x.shape[-1]
        inv_freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
        angles = positions.double()[:, None] * inv_freq
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
