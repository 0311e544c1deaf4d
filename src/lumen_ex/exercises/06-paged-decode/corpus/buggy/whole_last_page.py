# bug: reads every slot of the pages a sequence uses, so the stale slots past t on its last page are read too
# expect-kind: values
# expect-misconception: read-last-page-whole
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
        pages = block_table[b, : t // page_size + 1]
        k = torch.cat([k_pages[p] for p in pages], dim=1)                # (n_kv, n_used * page_size, d)
        v = torch.cat([v_pages[p] for p in pages], dim=1)
        k = k.repeat_interleave(n_heads // n_kv_heads, dim=0)
        v = v.repeat_interleave(n_heads // n_kv_heads, dim=0)
        q = (x_t[b] @ w_q).reshape(n_heads, 1, d_head)
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
        ys.append((w @ v).reshape(-1))
    return torch.stack(ys) @ w_o, k_pages, v_pages, seq_lens + 1
