"""Exercise 8: the backward pass of attention, by hand. Read README.md in this folder first."""

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    """The gradients of attention with respect to q, k and v, given the gradient of its output.

    The forward pass is exercise 1's: out = softmax(q @ k^T / sqrt(d_k), masked) @ v.
    q: (..., L_q, d_k)   k: (..., L_k, d_k)   v: (..., L_k, d_v)   d_out: (..., L_q, d_v), the gradient
    of the loss with respect to out. causal: a bottom-right causal mask (query i sits at position
    L_k - L_q + i). Any leading axes (or none), shared by all four.
    Returns (dq, dk, dv): dq (..., L_q, d_k), dk (..., L_k, d_k), dv (..., L_k, d_v), in q's dtype.
    torch.autograd is off in this exercise: write every step yourself.
    """
    # TODO: recompute the forward pass: the scaled scores, the causal mask if asked, P = softmax.
    # TODO: dv = P^T @ d_out, and dP = d_out @ v^T.
    # TODO: dS = P * (dP - rowsum(dP * P)): the softmax's backward, with its row term.
    # TODO: dq = dS @ k / sqrt(d_k) and dk = dS^T @ q / sqrt(d_k).
    raise NotImplementedError("attention_backward is not written yet")
