# attack: patches the worker shim's own call() (it shares the process) so every reply carries malformed extras: args_after and gradients that are not tensors, hoping to break the grader instead of failing
# category: forging
import sys

import torch

_worker = sys.modules.get("__main__")
_original_call = getattr(_worker, "call", None)


def _tampered_call(module, header, tensors):
    reply, out = _original_call(module, header, tensors)
    if header.get("echo_args"):
        reply["args_after"] = 5
    if header.get("grad"):
        reply["grads"] = {"grads": 7}
    return reply, out


if _original_call is not None:
    _worker.call = _tampered_call


def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)   # wrong: no 1/sqrt(d_k)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril()
