"""Correct: one 2 x 2 rotation matrix per (token, pair), (L, d/2, 2, 2), applied with einsum to x
reshaped into pairs (..., L, d/2, 2). Computed in float64 and cast back at the end."""

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    k = torch.arange(d // 2, dtype=torch.float64, device=x.device)
    theta = positions.to(torch.float64).unsqueeze(1) * torch.pow(torch.tensor(base, dtype=torch.float64, device=x.device), -2 * k / d)
    c, s = torch.cos(theta), torch.sin(theta)
    rot = torch.stack([torch.stack([c, -s], dim=-1), torch.stack([s, c], dim=-1)], dim=-2)   # (L, d/2, 2, 2)
    pairs = x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2)
    out = torch.einsum("lpij,...lpj->...lpi", rot, pairs)
    return out.reshape(x.shape).to(x.dtype)
