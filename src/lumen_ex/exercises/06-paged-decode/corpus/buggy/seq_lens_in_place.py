# bug: bumps the lengths with seq_lens += 1 and returns them: the values are right, but the caller's seq_lens changed
# expect-kind: side-effect
# expect-misconception: seq-lens-mutated
# expect-test: test_seq_lens_and_inputs_unchanged
import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    ys = []
    for b in range(B):
        t = int(seq_lens[b])
        page = block_table[b, t // page_size]
        k_pages[page, :, t % page_size] = (x_t[b] @ w_k).reshape(n_kv_heads, d_head)
        v_pages[page, :, t % page_size] = (x_t[b] @ w_v).reshape(n_kv_heads, d_head)
        pos = torch.arange(t + 1)
        phys = block_table[b, pos // page_size]
        k = k_pages[phys, :, pos % page_size].transpose(0, 1).repeat_interleave(n_heads // n_kv_heads, dim=0)
        v = v_pages[phys, :, pos % page_size].transpose(0, 1).repeat_interleave(n_heads // n_kv_heads, dim=0)
        q = (x_t[b] @ w_q).reshape(n_heads, 1, d_head)
        ys.append((torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1) @ v).reshape(-1))
    seq_lens += 1                                                       # every sequence is one token longer
    return torch.stack(ys) @ w_o, k_pages, v_pages, seq_lens
