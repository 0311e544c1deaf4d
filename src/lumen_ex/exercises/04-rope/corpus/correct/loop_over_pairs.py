"""Correct: a plain Python loop over the d/2 pairs, each frequency a Python float (double
precision), each pair rotated on its own and the columns put back in order with torch.stack."""

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    pos = positions.to(torch.float64)
    columns = []
    for i in range(d // 2):
        freq = base ** (-2 * i / d)
        angle = pos * freq                                  # (L,)
        c = torch.cos(angle).to(x.dtype)[:, None]           # (L, 1)
        s = torch.sin(angle).to(x.dtype)[:, None]
        x0 = x[..., 2 * i : 2 * i + 1]                      # (..., L, 1)
        x1 = x[..., 2 * i + 1 : 2 * i + 2]
        columns.append(x0 * c - x1 * s)
        columns.append(x0 * s + x1 * c)
    return torch.cat(columns, dim=-1)
