# bug: Hugging Face's cat([freqs, freqs]) angle table combined with adjacent-pair rotate_every_two: the two numbers of a pair turn by different angles
# expect-kind: values
# expect-misconception: angle-table-not-interleaved
# expect-test: test_values[4d]

import torch


def rotate_every_two(x):
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def rope(x, positions, base=10000.0):
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=x.device).double() / dim))
    freqs = positions[:, None].double() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos().to(x.dtype) + rotate_every_two(x) * emb.sin().to(x.dtype)
