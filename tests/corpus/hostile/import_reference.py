# attack: looks for the grader in sys.modules, imports lumen_ex.reference / lumen_ex.graders, and searches the disk for src/lumen_ex/reference/attention.py to run it as its own answer; wrong answers when nothing is found
# category: cheating
# The search stops after 3 s of walking (what it can see depends on the machine: a larger /usr would
# otherwise make this import run into the call time limit on a loaded machine, a verdict of the load).
import importlib
import importlib.util
import os
import sys
import time

import torch

_deadline = time.monotonic() + 3.0

_ref = None
for name, mod in list(sys.modules.items()):
    if any(s in name for s in ("reference", "graders", "lumen_ex")) and hasattr(mod, "causal_mask"):
        _ref = mod
for name in ("lumen_ex.reference.attention", "reference.attention", "lumen_ex.graders.attention.test_attention"):
    if _ref is None:
        try:
            _ref = importlib.import_module(name)
            if not hasattr(_ref, "scaled_dot_product_attention"):
                _ref = None
        except Exception as exc:  # noqa: BLE001
            print(f"import {name}: {type(exc).__name__}")
if _ref is None:
    for root in [p for p in sys.path if os.path.isdir(p)] + ["/work", "/workspace", "/opt", "/srv", "/home", "/root", "/usr/lib", "/usr/local"]:
        for dirpath, dirnames, filenames in os.walk(root):
            if time.monotonic() > _deadline:
                break
            if dirpath.count(os.sep) > 8:
                dirnames[:] = []
            if os.path.basename(dirpath) == "reference" and "attention.py" in filenames:
                spec = importlib.util.spec_from_file_location("stolen", os.path.join(dirpath, "attention.py"))
                _ref = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(_ref)
                break
        if _ref is not None:
            break
print(f"reference found: {_ref is not None}")


def scaled_dot_product_attention(q, k, v, mask=None):
    if _ref is not None:
        return _ref.scaled_dot_product_attention(q, k, v, mask)
    weights = torch.full((*q.shape[:-1], k.shape[-2]), 1.0 / k.shape[-2], dtype=q.dtype)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    if _ref is not None:
        return _ref.causal_mask(L_q, L_k, device)
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device)
