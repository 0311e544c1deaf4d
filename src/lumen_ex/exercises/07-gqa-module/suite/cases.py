"""Seeded inputs for exercise 7's suite: a module's sizes, its weights (as a state_dict) and x.

Every axis of x and of the output has a distinct size (B, L, d_model), and the three head layouts
(grouped-query, multi-head, multi-query) use different widths, so that a wrong shape or a wrong
scale can be named. Weights are scaled so that the scores have unit variance: the softmax is neither
uniform nor one-hot, and every known mistake changes the output far beyond the tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lumen_ex.author import exercise, inputs

ref = exercise(__file__).reference

GQA = {"B": 3, "L": 7, "d_model": 24, "n_heads": 6, "n_kv_heads": 2}     # d_head 4, 3 query heads per KV head
MHA = {"B": 2, "L": 5, "d_model": 20, "n_heads": 4, "n_kv_heads": 4}     # d_head 5
MQA = {"B": 2, "L": 6, "d_model": 15, "n_heads": 5, "n_kv_heads": 1}     # d_head 3
LAYOUTS = {"gqa": GQA, "mha": MHA, "mqa": MQA}
NAMES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")


@dataclass
class Case:
    """x (B, L, d_model) and the module's weights, in float64 on the CPU."""

    x: torch.Tensor
    state: dict[str, torch.Tensor]
    sizes: dict[str, int]

    @property
    def init_args(self) -> tuple[int, int, int]:
        return self.sizes["d_model"], self.sizes["n_heads"], self.sizes["n_kv_heads"]

    @property
    def axis_sizes(self) -> dict[str, int]:
        return {"B": self.sizes["B"], "L": self.sizes["L"], "d_model": self.sizes["d_model"]}

    def rounded(self, dtype: torch.dtype) -> Case:
        """The same case with x and every weight rounded to ``dtype`` (held in float64): the reference
        computed from it leaves only the learner's arithmetic to the tolerance."""
        r = lambda t: t.to(dtype).to(torch.float64)      # noqa: E731
        return Case(r(self.x), {k: r(v) for k, v in self.state.items()}, dict(self.sizes))

    def state_as(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        return {k: v.to(dtype) for k, v in self.state.items()}

    def module(self) -> torch.nn.Module:
        """The reference module in float64 with these weights."""
        m = ref.GroupedQueryAttention(*self.init_args).double()
        m.load_state_dict(self.state, strict=True)
        return m

    def expected(self, causal: bool = True) -> torch.Tensor:
        with torch.no_grad():
            return self.module()(self.x, causal=causal)                # (B, L, d_model)


def case(seed: int, layout: str = "gqa", *, bound: float | None = None) -> Case:
    s = dict(LAYOUTS[layout])
    gen = inputs.generator(seed)
    B, L, D, H, Hkv = s["B"], s["L"], s["d_model"], s["n_heads"], s["n_kv_heads"]
    x = inputs.randn(gen, B, L, D)                                      # (B, L, d_model)
    if bound is not None:
        x = x.clamp(-bound, bound)
    w_q, w_k, w_v, w_o = inputs.projections(gen, D, H, Hkv, D // H)     # (in, out) each
    state = {n: w.T.contiguous() for n, w in zip(NAMES, (w_q, w_k, w_v, w_o))}   # nn.Linear's (out, in)
    return Case(x, state, s)


def reference_parameters(layout: str) -> dict[str, tuple[int, ...]]:
    """The reference module's parameter names and shapes for a layout."""
    s = LAYOUTS[layout]
    m = ref.GroupedQueryAttention(s["d_model"], s["n_heads"], s["n_kv_heads"])
    return {name: tuple(p.shape) for name, p in m.named_parameters()}
