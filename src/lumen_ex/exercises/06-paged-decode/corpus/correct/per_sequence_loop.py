"""Correct: a plain loop over the sequences and their positions, one (page, slot) at a time."""

import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1], k_pages.shape[2], k_pages.shape[3]
    group = n_heads // n_kv_heads
    q = (x_t @ w_q).reshape(B, n_heads, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    outs = []
    for b in range(B):
        t = int(seq_lens[b])
        page = int(block_table[b, t // page_size])
        k_pages[page, :, t % page_size] = k_new[b]
        v_pages[page, :, t % page_size] = v_new[b]
        keys, values = [], []
        for pos in range(t + 1):
            p = int(block_table[b, pos // page_size])
            keys.append(k_pages[p, :, pos % page_size])            # (n_kv_heads, d_head)
            values.append(v_pages[p, :, pos % page_size])
        k = torch.stack(keys, dim=1)                                 # (n_kv_heads, t + 1, d_head)
        v = torch.stack(values, dim=1)
        heads = []
        for h in range(n_heads):
            kv = h // group
            scores = k[kv] @ q[b, h] / math.sqrt(d_head)             # (t + 1,)
            heads.append(torch.softmax(scores, dim=0) @ v[kv])       # (d_head,)
        outs.append(torch.cat(heads))
    y_t = torch.stack(outs) @ w_o
    return y_t, k_pages, v_pages, seq_lens + 1
