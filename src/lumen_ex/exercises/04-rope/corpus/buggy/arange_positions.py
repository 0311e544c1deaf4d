# bug: ignores positions and rotates token j by j (torch.arange(L)): a decoding step puts the new token at position 0
# expect-kind: values
# expect-misconception: positions-ignored
# expect-test: test_decode_single_token

import torch


def rope(x, positions, base=10000.0):
    L, d = x.shape[-2], x.shape[-1]
    pos = torch.arange(L, device=x.device, dtype=torch.float64)
    inv_freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angles = pos[:, None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
