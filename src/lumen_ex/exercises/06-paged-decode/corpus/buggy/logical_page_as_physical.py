# bug: never looks pages up in the block table: logical page j is used as physical page j, for the write and the read
# expect-kind: values
# expect-misconception: logical-page-as-physical
import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    ys = []
    for b in range(B):
        t = int(seq_lens[b])
        k_pages[t // page_size, :, t % page_size] = (x_t[b] @ w_k).reshape(n_kv_heads, d_head)
        v_pages[t // page_size, :, t % page_size] = (x_t[b] @ w_v).reshape(n_kv_heads, d_head)
        pos = torch.arange(t + 1)
        k = k_pages[pos // page_size, :, pos % page_size].transpose(0, 1)
        v = v_pages[pos // page_size, :, pos % page_size].transpose(0, 1)
        k = k.repeat_interleave(n_heads // n_kv_heads, dim=0)
        v = v.repeat_interleave(n_heads // n_kv_heads, dim=0)
        q = (x_t[b] @ w_q).reshape(n_heads, 1, d_head)
        ys.append((torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1) @ v).reshape(-1))
    return torch.stack(ys) @ w_o, k_pages, v_pages, seq_lens + 1
