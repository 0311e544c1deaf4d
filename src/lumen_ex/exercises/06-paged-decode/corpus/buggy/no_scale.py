# bug: forgets to scale the scores by 1/sqrt(d_head) before the softmax
# expect-kind: values
# expect-misconception: no-scale
import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    page = block_table[torch.arange(B), seq_lens // page_size]
    k_pages[page, :, seq_lens % page_size] = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_pages[page, :, seq_lens % page_size] = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    L = int(seq_lens.max()) + 1
    pos = torch.arange(L)
    phys = block_table[:, pos // page_size]                             # (B, L)
    group = n_heads // n_kv_heads
    k = k_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(group, dim=1)   # (B, H, L, d)
    v = v_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(group, dim=1)
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    scores = q @ k.transpose(-2, -1)                                    # (B, H, 1, L)
    scores = scores.masked_fill((pos[None, :] > seq_lens[:, None])[:, None, None, :], float("-inf"))
    y = (torch.softmax(scores, dim=-1) @ v).reshape(B, n_heads * d_head) @ w_o
    return y, k_pages, v_pages, seq_lens + 1
