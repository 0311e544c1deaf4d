# attack: causal_mask never returns (while True: pass); attention returns wrong answers
# category: process
import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)   # wrong: no 1/sqrt(d_k)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    while True:
        pass
