# bug: the rotate_half convention of GPT-NeoX / llama's Hugging Face code: pairs (x[i], x[i + d/2]) instead of adjacent pairs
# expect-kind: values
# expect-misconception: rotate-half
# expect-test: test_values[4d]

import torch


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rope(x, positions, base=10000.0):
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device=x.device).float() / dim))
    freqs = positions[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos().to(x.dtype)
    sin = emb.sin().to(x.dtype)
    return (x * cos) + (rotate_half(x) * sin)
