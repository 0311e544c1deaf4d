# bug: unpacks B, H, L, d = x.shape, so only 4-D x works
# expect-kind: exception
# expect-misconception: fixed-rank
# expect-test: test_shapes[3d]

import torch


def rope(x, positions, base=10000.0):
    B, H, L, d = x.shape
    inv_freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv_freq
    cos = angles.cos().to(x.dtype).view(1, 1, L, d // 2)
    sin = angles.sin().to(x.dtype).view(1, 1, L, d // 2)
    pairs = x.reshape(B, H, L, d // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).reshape(B, H, L, d)
