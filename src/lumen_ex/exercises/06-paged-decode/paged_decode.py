"""Exercise 6: one decoding step over a paged KV cache. Read README.md in this folder first."""

import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    """Decode one token for each of B sequences whose keys and values live in a shared pool of pages.

    x_t: (B, d_model), the newest token of each sequence.
    k_pages, v_pages: (n_pages, n_kv_heads, page_size, d_head), the page pools shared by all sequences.
    block_table: (B, max_pages) int64; sequence b's j-th logical page is physical page block_table[b, j].
    seq_lens: (B,) int64, the tokens already cached per sequence; the new token of b goes at t = seq_lens[b].
    w_q: (d_model, n_heads * d_head); w_k, w_v: (d_model, n_kv_heads * d_head); w_o: (n_heads * d_head, d_model).
    Returns (y_t, k_pages, v_pages, seq_lens + 1): y_t (B, d_model), the same pool tensors with the new
    entries written into them, and new lengths (leave the caller's seq_lens unchanged).
    """
    # TODO: project x_t into a query, a key and a value per sequence, and split them into heads.
    # TODO: write the new key and value in place: page block_table[b, t // page_size], slot t % page_size.
    # TODO: for each sequence, gather exactly its positions 0..t (the new one included) from the pools.
    # TODO: attend (query head h reads KV head h // (n_heads // n_kv_heads)), merge the heads, apply w_o.
    raise NotImplementedError("paged_decode_step is not written yet")
