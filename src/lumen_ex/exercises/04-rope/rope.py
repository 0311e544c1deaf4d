"""Exercise 4: rotary position embedding (RoPE). Read README.md in this folder first."""

import math

import torch


def rope(x, positions, base=10000.0):
    """Rotate each adjacent pair (x[..., 2i], x[..., 2i+1]) of x by the angle positions * base ** (-2i / d).

    x: (..., L, d), d even, any leading axes (or none).   positions: (L,) integers, on x's device.
    out[..., 2i]     = x[..., 2i] * cos - x[..., 2i+1] * sin
    out[..., 2i + 1] = x[..., 2i] * sin + x[..., 2i+1] * cos
    Returns a new tensor (..., L, d) with x's dtype and device; x itself is not modified.
    """
    # TODO: the frequency of pair i, base ** (-2i / d), for i = 0 .. d/2 - 1.
    # TODO: the angles, one per token and pair: positions (L,) times the frequencies (d/2,) -> (L, d/2).
    # TODO: rotate x[..., 0::2] and x[..., 1::2] by those angles, and interleave the results back.
    raise NotImplementedError("rope is not written yet")
