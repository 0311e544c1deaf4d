# bug: llama's view_as_complex(x.float().reshape(...)) without .contiguous(): a non-contiguous float32 x is not copied by .float(), and view_as_complex refuses its strides
# expect-kind: exception
# expect-misconception: complex-view-strides
# expect-test: test_noncontiguous_inputs

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device)[: (d // 2)].float() / d))
    freqs = torch.outer(positions.float(), freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    x_out = torch.view_as_real(x_ * freqs_cis).flatten(-2)
    return x_out.type_as(x)
