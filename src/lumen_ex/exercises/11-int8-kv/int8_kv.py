"""Exercise 11: an int8 KV cache. Read README.md in this folder first."""

import math

import torch


def quantize_kv(x):
    """Symmetric absmax int8 quantization over the last axis: one scale per row (per token, per head).

    x: (..., d) floating point.
    Returns (x_q, scale): x_q (..., d) int8, scale (..., 1) in x's dtype, with
    scale = amax(|x|) / 127 over the last axis (1 for a row of zeros) and
    x_q = clamp(round(x / scale), -127, 127), rounded half to even (torch.round).
    """
    # TODO: the largest |x| of each row, keeping the last axis: (..., 1).
    # TODO: the scale, amax / 127, and 1 where a row is all zeros.
    # TODO: the codes: divide, round (not floor, not a bare cast), clamp to [-127, 127], cast to int8.
    raise NotImplementedError("quantize_kv is not written yet")


def int8_decode_step(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t):
    """One decoding step over an int8 KV cache.

    q_t: (B, H, d), the new token's query (not quantized).
    k_q, v_q: (B, H_kv, T, d) int8 codes of the T cached tokens (T may be 0).
    k_scale, v_scale: (B, H_kv, T, 1), their scales, in q_t's dtype.
    k_t, v_t: (B, H_kv, d), the new token's key and value.
    Returns (out_t, k_q, k_scale, v_q, v_scale): out_t (B, H, d) and the caches grown to T + 1 tokens.
    """
    # TODO: quantize k_t and v_t with quantize_kv, and append codes and scales at the end of the time axis.
    # TODO: dequantize the grown caches (codes * scales) in q_t's dtype.
    # TODO: attend from q_t to all T + 1 tokens (query head h reads KV head h // (H // H_kv)), scale 1/sqrt(d).
    raise NotImplementedError("int8_decode_step is not written yet")
