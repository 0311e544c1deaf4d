"""Correct: the pairs taken apart with unflatten + unbind, angles in float64 from an exp/log
frequency formula, results stacked on a new last axis and flattened back."""

import math

import torch


def rope(x, positions, base=10000.0):
    *_, L, d = x.shape
    half = torch.arange(d // 2, device=x.device, dtype=torch.float64)
    inv_freq = torch.exp(-math.log(base) * 2 * half / d)               # (d/2,)
    theta = positions.double().unsqueeze(-1) * inv_freq                # (L, d/2)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    a, b = x.unflatten(-1, (d // 2, 2)).unbind(-1)                     # (..., L, d/2) each
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return rotated.flatten(start_dim=-2)
