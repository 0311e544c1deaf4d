# attack: double-forks a setsid() daemon (tagged with a marker in its argv) that should outlive the check; wrong answers
# category: process
import os
import sys

import torch

MARKER = "LUMEN-HOSTILE-MARKER"
_spawned = False


def _daemonize():
    global _spawned
    if _spawned:
        return
    _spawned = True
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                os.execv(sys.executable, [sys.executable, "-c", "import time\nwhile True: time.sleep(1)", MARKER])
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    print(f"daemon spawned (marker {MARKER})")


def scaled_dot_product_attention(q, k, v, mask=None):
    _daemonize()
    weights = torch.full((*q.shape[:-1], k.shape[-2]), 1.0 / k.shape[-2], dtype=q.dtype)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    _daemonize()
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device)
