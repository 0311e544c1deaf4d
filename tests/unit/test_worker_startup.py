"""A worker's start-up: torch's meta kernels run without importing ``torch._dynamo``
(src/lumen_ex/sandbox/inside/worker.py ``skip_dynamo_import``), which would double the cost of
every worker's torch import, and they compute what they computed before."""

from __future__ import annotations

import json
import subprocess
import sys

from lumen_ex.sandbox.base import inside_dir

# Meta operations of the kinds the hidden suites' meta tests reach (comparisons, matmul, softmax,
# masked_fill, einsum, cat, where, repeat_interleave, complex views), each one's shape and dtype.
PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torch, worker
worker.torch = torch
marked = worker.skip_dynamo_import(torch) if sys.argv[2] == "skip" else 0
worker._load_meta_kernels()
q = torch.empty(2, 3, 8, device="meta"); k = torch.empty(2, 5, 8, device="meta")
mask = torch.ones(3, 5, dtype=torch.bool, device="meta").tril(diagonal=2)
outs = [(q @ k.transpose(-2, -1) / 8 ** 0.5).masked_fill(~mask, float("-inf")).softmax(-1),
        torch.einsum("bld,bmd->blm", q, k), torch.cat([q, k], 1), torch.where(q > 0, q, q * 2),
        q.repeat_interleave(2, dim=1), torch.view_as_complex(torch.empty(4, 2, device="meta")),
        torch.logsumexp(q, dim=-1), (q[:, :, None] <= q[:, None, :]).sum()]
print(json.dumps({"marked": marked, "dynamo": "torch._dynamo" in sys.modules,
                  "outs": [[list(o.shape), str(o.dtype)] for o in outs]}))
"""


def _probe(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-I", "-c", PROBE, str(inside_dir()), mode], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_meta_kernels_run_without_dynamo_and_compute_the_same():
    spared, plain = _probe("skip"), _probe("plain")
    assert spared["marked"] > 100, spared                 # torch 2.13 wraps about 300
    assert not spared["dynamo"], "torch._dynamo was imported all the same"
    assert plain["dynamo"], "without the marks the meta kernels import torch._dynamo (else this test proves nothing)"
    assert spared["outs"] == plain["outs"]
