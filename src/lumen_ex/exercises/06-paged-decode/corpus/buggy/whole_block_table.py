# bug: reads every entry of the block table (all max_pages pages), unused ones included, with no mask
# expect-kind: values
# expect-misconception: read-whole-block-table
import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B, max_pages = block_table.shape
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    page = block_table[torch.arange(B), seq_lens // page_size]
    k_pages[page, :, seq_lens % page_size] = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_pages[page, :, seq_lens % page_size] = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    k = k_pages[block_table].transpose(1, 2).reshape(B, n_kv_heads, max_pages * page_size, d_head)
    v = v_pages[block_table].transpose(1, 2).reshape(B, n_kv_heads, max_pages * page_size, d_head)
    k = k.repeat_interleave(n_heads // n_kv_heads, dim=1)
    v = v.repeat_interleave(n_heads // n_kv_heads, dim=1)
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return (w @ v).reshape(B, -1) @ w_o, k_pages, v_pages, seq_lens + 1
