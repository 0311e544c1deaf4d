# expect-note: test_dtype[float64] test_gradients_flow
"""Correct: llama's complex-number formulation. The frequencies and angles are float32, made into
unit complex numbers with torch.polar; x is viewed as (..., d/2) complex numbers in float32 (so
bfloat16 works: torch has no complex bfloat16), multiplied, viewed back as real and cast to x's
dtype. .contiguous() before view_as_complex, which needs each pair side by side in memory. Float64
inputs get float64 results carrying float32 rounding: accepted, with a note (docs/tolerances.md)."""

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device)[: d // 2].float() / d))
    angles = torch.outer(positions.float(), freqs)                     # (L, d/2)
    freqs_cis = torch.polar(torch.ones_like(angles), angles)           # (L, d/2) complex64
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    out = torch.view_as_real(x_ * freqs_cis).flatten(-2)
    return out.type_as(x)
