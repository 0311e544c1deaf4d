# bug: divides the scores by d_head instead of sqrt(d_head)
# expect-kind: values
# expect-misconception: scale-1/d_head
import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1], k_pages.shape[2], k_pages.shape[3]
    group = n_heads // n_kv_heads
    q = (x_t @ w_q).reshape(B, n_heads, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    ys = []
    for b in range(B):
        t = int(seq_lens[b])
        page = int(block_table[b, t // page_size])
        k_pages[page, :, t % page_size] = k_new[b]
        v_pages[page, :, t % page_size] = v_new[b]
        pos = torch.arange(t + 1)
        phys = block_table[b, pos // page_size]
        k = k_pages[phys, :, pos % page_size].transpose(0, 1).repeat_interleave(group, dim=0)   # (H, t+1, d)
        v = v_pages[phys, :, pos % page_size].transpose(0, 1).repeat_interleave(group, dim=0)
        scores = (q[b][:, None, :] @ k.transpose(-2, -1)) / d_head       # (H, 1, t+1)
        ys.append((torch.softmax(scores, dim=-1) @ v).reshape(-1))
    return torch.stack(ys) @ w_o, k_pages, v_pages, seq_lens + 1
