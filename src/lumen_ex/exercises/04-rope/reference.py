"""Reference for exercise 4: rotary position embedding (RoPE), RoFormer's adjacent-pair convention."""

from __future__ import annotations

import torch


def rope(x, positions, base=10000.0):
    """Rotate each adjacent pair (x[..., 2i], x[..., 2i+1]) by the angle positions * base ** (-2i / d).

    x: (..., L, d) with d even, any leading axes (or none); positions: (L,) integers, on x's device.
    out[..., 2i]     = x[..., 2i] cos - x[..., 2i+1] sin
    out[..., 2i + 1] = x[..., 2i] sin + x[..., 2i+1] cos
    Returns a new tensor (..., L, d) with x's dtype and device; x is not modified.
    """
    d = x.shape[-1]
    # float64 throughout: an angle of thousands of radians keeps ~1e-12 of absolute accuracy.
    i = torch.arange(d // 2, dtype=torch.float64, device=x.device)             # (d/2,)
    inv_freq = float(base) ** (-2.0 * i / d)                                     # (d/2,)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]            # (L, d/2)
    cos, sin = angles.cos(), angles.sin()                                        # (L, d/2)
    x64 = x.to(torch.float64)
    x_even, x_odd = x64[..., 0::2], x64[..., 1::2]                               # (..., L, d/2)
    out_even = x_even * cos - x_odd * sin                                        # (..., L, d/2)
    out_odd = x_even * sin + x_odd * cos                                         # (..., L, d/2)
    out = torch.stack([out_even, out_odd], dim=-1).flatten(-2)                   # (..., L, d/2, 2) -> (..., L, d)
    return out.to(x.dtype)                                                       # (..., L, d)
