# bug: float32 angles as in transformers, but cos and sin are never cast to x's dtype: float16 and bfloat16 x get float32 results
# expect-kind: dtype
# expect-misconception: float32-not-cast-back
# expect-test: test_dtype[float16]

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    freqs = positions[:, None].float() * inv_freq[None, :]
    cos, sin = freqs.cos(), freqs.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
