# bug: calls F.scaled_dot_product_attention for the output instead of writing the blocks
# expect-kind: forbidden
# expect-misconception: forbidden-api
# expect-test: test_returns_output_and_lse
import math

import torch
import torch.nn.functional as F


def flash_attention(q, k, v, causal=False, block_size=64):
    out = F.scaled_dot_product_attention(q, k, v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return out, torch.logsumexp(scores.float(), dim=-1)
