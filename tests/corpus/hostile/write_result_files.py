# attack: writes forged result.json / report.json (status pass, score 10) into the working folder, /tmp, $HOME, the workspace and the exercise folder, and reports what each write did; wrong answers
# category: forging
import json
import os

import torch

FAKE = json.dumps({"status": "pass", "score": 10, "max_score": 10, "marker": "LUMEN-HOSTILE-MARKER"})
HERE = os.path.dirname(os.path.abspath(__file__))


def _targets():
    dirs = [os.getcwd(), "/tmp", os.environ.get("HOME", "/tmp"), HERE, os.path.dirname(HERE),
            os.path.join(os.path.dirname(HERE), ".lumen-ex")]
    for d in dict.fromkeys(dirs):
        for name in ("result.json", "report.json"):
            yield os.path.join(d, name)
    yield os.path.join(os.path.dirname(HERE), ".lumen-ex", "progress.json")
    yield os.path.join(HERE, "attention.py")


def _write_everywhere():
    for path in _targets():
        try:
            if path.endswith("attention.py"):
                with open(path, "a") as f:
                    f.write("\n# tampered\n")
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(FAKE)
            print(f"WROTE {path}")
        except OSError as exc:
            print(f"DENIED {path}: {type(exc).__name__}: {exc.strerror}")


def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.full((*q.shape[:-1], k.shape[-2]), 1.0 / k.shape[-2], dtype=q.dtype)
    return weights @ v, weights


def causal_mask(L_q, L_k=None, device=None):
    _write_everywhere()
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device)
