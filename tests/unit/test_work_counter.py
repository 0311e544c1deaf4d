"""The worker's work counter (src/lumen_ex/sandbox/inside/work_counter.py), run in this process:
the elements every op produces, the largest intermediate, and the FLOPs of the matrix products,
whichever way the product is written; and the harness's check of the summary a worker sends back
(src/lumen_ex/harness/proxy.py ``_checked_ops``)."""

from __future__ import annotations

import pytest
import torch

from lumen_ex.harness.proxy import _checked_ops
from lumen_ex.sandbox.inside import wire
from lumen_ex.sandbox.inside.work_counter import WorkCounter

A = torch.randn(2, 3, 5, 4, dtype=torch.float64)      # (B, H, m, k)
B = torch.randn(2, 3, 4, 7, dtype=torch.float64)      # (B, H, k, n)
FLOPS_4D = 2 * 2 * 3 * 5 * 4 * 7                      # 2·m·k·n for each of the B·H products
FLOPS_2D = 2 * 5 * 4 * 7

PRODUCTS = {
    "@ on 4-d tensors": (lambda: A @ B, FLOPS_4D),
    "torch.matmul": (lambda: torch.matmul(A, B), FLOPS_4D),
    "einsum": (lambda: torch.einsum("bhik,bhkj->bhij", A, B), FLOPS_4D),
    "bmm of the flattened batch": (lambda: torch.bmm(A.reshape(6, 5, 4), B.reshape(6, 4, 7)), FLOPS_4D),
    "baddbmm": (lambda: torch.baddbmm(torch.zeros(6, 5, 7, dtype=torch.float64), A.reshape(6, 5, 4),
                                      B.reshape(6, 4, 7)), FLOPS_4D),
    "addbmm (sums over the batch too)": (lambda: torch.addbmm(torch.zeros(5, 7, dtype=torch.float64),
                                                              A.reshape(6, 5, 4), B.reshape(6, 4, 7)), FLOPS_4D),
    "mm": (lambda: A[0, 0] @ B[0, 0], FLOPS_2D),
    "linear with a bias (addmm)": (lambda: torch.nn.functional.linear(A[0, 0], B[0, 0].T, torch.zeros(7, dtype=torch.float64)),
                                   FLOPS_2D),
    "tensordot": (lambda: torch.tensordot(A[0, 0], B[0, 0], dims=1), FLOPS_2D),
    "matrix @ vector (mv)": (lambda: A[0, 0] @ B[0, 0, :, 0], 2 * 5 * 4),
    "vector @ vector (dot)": (lambda: A[0, 0, 0] @ B[0, 0, :, 0], 2 * 4),
    "broadcast-multiply-sum (no matrix product)": (lambda: (A[..., :, None, :] * B.transpose(-2, -1)[..., None, :, :]).sum(-1), 0),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_matmul_flops_whichever_way_the_product_is_written(name):
    compute, flops = PRODUCTS[name]
    counter = WorkCounter()
    with counter:
        out = compute()
    summary = counter.summary()
    assert summary["matmul_flops"] == flops, summary
    assert summary["total_elements"] >= out.numel() and summary["largest"] >= out.numel()


def test_half_the_products_half_the_flops():
    """What exercise 9's cost test compares: skipping half of the block products halves the FLOPs."""
    blocks = [(A[0, 0], B[0, 0])] * 8
    counts = []
    for kept in (blocks, blocks[:4]):
        counter = WorkCounter()
        with counter:
            for a, b in kept:
                a @ b
        counts.append(counter.summary()["matmul_flops"])
    assert counts == [8 * FLOPS_2D, 4 * FLOPS_2D]


def test_the_harness_checks_the_flops_a_worker_reports():
    ok = {"total_elements": 6, "ops": 1, "largest": 6, "largest_op": "mm", "largest_shape": [2, 3]}
    assert _checked_ops({**ok, "matmul_flops": 48})["matmul_flops"] == 48
    assert _checked_ops(ok)["matmul_flops"] is None     # none sent (a patched counter, say): none claimed
    for bad in (-1, 1.5, "48", True, [48]):
        with pytest.raises(wire.ProtocolError):
            _checked_ops({**ok, "matmul_flops": bad})
