# bug: torch.view_as_complex straight on x: fine for float32, float64 and float16, but torch has no complex bfloat16
# expect-kind: exception
# expect-misconception: complex-bfloat16
# expect-test: test_dtype[bfloat16]

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).double() / d))
    angles = torch.outer(positions.double(), freqs)
    freqs_cis = torch.polar(torch.ones_like(angles), angles)
    x_c = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    out = torch.view_as_real(x_c * freqs_cis).flatten(-2)
    return out.to(x.dtype)
