"""Hidden inputs for exercise 10 (streaming_decode_step), and the picture of the slots in feedback.

The phase of every case is fixed, not drawn from the seed: n_seen, n_sink and window, so which slot
the new token goes to, which slots are occupied and which token each one holds. Only the values are
seeded. So every verdict is the same at every seed. The phases are chosen so that every wrong slot
rule of src/lumen_ex/exercises/10-sink-window/mistakes.py writes another slot than the right one
(n_sink is no multiple of window) and the empty slots, which hold zeros as the contract says, are
there to be wrongly attended while the cache fills.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lumen_ex.author import inputs

# Every axis a distinct size: B=3, H=6, H_kv=2, C=7 (n_sink=2 + window=5), d=4.
STEP_SIZES = {"B": 3, "H": 6, "H_kv": 2, "d": 4}
N_SINK, WINDOW = 2, 5


@dataclass
class StepCase:
    """One streaming step: the new token's query, key and value, the caches and the three ints, in
    float64. Unoccupied slots of the caches hold zeros."""

    q_t: torch.Tensor
    k_t: torch.Tensor
    v_t: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    n_seen: int
    n_sink: int
    window: int
    sizes: dict[str, int]

    @property
    def C(self) -> int:
        return self.n_sink + self.window

    @property
    def n_occ(self) -> int:
        """The slots occupied after the step."""
        return min(self.n_seen + 1, self.C)

    def tensors(self) -> list[torch.Tensor]:
        return [self.q_t, self.k_t, self.v_t, self.k_cache, self.v_cache]

    def fresh(self) -> tuple:
        """The float64 arguments, new tensors, for the reference and the variants."""
        return (*(t.clone() for t in self.tensors()), self.n_seen, self.n_sink, self.window)

    def args(self, dtype: torch.dtype) -> list:
        """The arguments as the learner gets them: the tensors cast to ``dtype``, the ints as ints."""
        return [t.to(dtype) for t in self.tensors()] + [self.n_seen, self.n_sink, self.window]

    def rounded(self, dtype: torch.dtype) -> "StepCase":
        """The same case with every tensor rounded to ``dtype`` (kept in float64)."""
        ts = [t.to(dtype).to(torch.float64) for t in self.tensors()]
        return StepCase(*ts, self.n_seen, self.n_sink, self.window, self.sizes)

    def axis_sizes(self) -> dict[str, int]:
        """Every axis name with its size, for naming the axes of a wrong shape (on a tie, the first wins)."""
        s = self.sizes
        named = {"B": s["B"], "H": s["H"], "H_kv": s["H_kv"], "C": self.C, "d": s["d"], "n_occ": self.n_occ,
                 "C+1": self.C + 1}
        out: dict[str, int] = {}
        for name, size in named.items():
            if size not in out.values():
                out[name] = size
        return out


def slot_tokens(n_seen: int, n_sink: int, window: int) -> list[int | None]:
    """The token each slot holds after ``n_seen`` tokens (None: empty)."""
    C = n_sink + window
    held: list[int | None] = [None] * C
    for t in range(n_seen):
        held[t if t < n_sink else n_sink + (t - n_sink) % window] = t
    return held


def step_case(seed: int, n_seen: int, *, n_sink: int = N_SINK, window: int = WINDOW, bound: float | None = None,
              **sizes: int) -> StepCase:
    """A step whose caches hold ``n_seen`` earlier tokens (seeded values in the occupied slots, zeros in
    the others); ``bound`` clamps every value to [-bound, bound] (the dtype tests: inputs.DTYPE_BOUND)."""
    s = {**STEP_SIZES, **sizes}
    gen = inputs.generator(seed)
    B, H, H_kv, d = s["B"], s["H"], s["H_kv"], s["d"]
    C = n_sink + window
    q_t, k_t, v_t = (_bound(inputs.randn(gen, B, n, d), bound) for n in (H, H_kv, H_kv))
    occupied = torch.tensor([tok is not None for tok in slot_tokens(n_seen, n_sink, window)])   # (C,)
    k_cache = _bound(inputs.randn(gen, B, H_kv, C, d), bound) * occupied[:, None]               # (B, H_kv, C, d)
    v_cache = _bound(inputs.randn(gen, B, H_kv, C, d), bound) * occupied[:, None]
    return StepCase(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window, s)


def _bound(x: torch.Tensor, bound: float | None) -> torch.Tensor:
    return x if bound is None else x.clamp(-bound, bound)


# -------------------------------------------------------------------------------------------------
# Whole sequences


# The decoding tests: 12 tokens through a cache of 2 sinks and a window of 3 (C = 5), so the ring
# wraps three times. B=2, H=6, H_kv=3, d=4 (the probe's d=13 holds a one-hot value per token).
STREAM = {"B": 2, "H": 6, "H_kv": 3, "d": 4, "L": 12, "n_sink": 2, "window": 3}


def sequence(seed: int, *, d: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded q (B, H, L, d), k and v (B, H_kv, L, d) of a whole sequence."""
    s = STREAM
    d = d or s["d"]
    gen = inputs.generator(seed)
    return (inputs.randn(gen, s["B"], s["H"], s["L"], d), inputs.randn(gen, s["B"], s["H_kv"], s["L"], d),
            inputs.randn(gen, s["B"], s["H_kv"], s["L"], d))


def probe(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A sequence whose outputs are its attention weights: zero queries (every attended key gets the
    same weight) and token s's value the one-hot vector e_s, so out_t[..., s] is the weight on token s.
    d = L + 1 (the last coordinate stays 0); the keys are seeded."""
    s = STREAM
    L, d = s["L"], s["L"] + 1
    _, k, _ = sequence(seed, d=d)
    q = torch.zeros(s["B"], s["H"], L, d, dtype=torch.float64)
    v = torch.eye(L, d, dtype=torch.float64).expand(s["B"], s["H_kv"], L, d).clone()   # (B, H_kv, L, d)
    return q, k, v


def probe_weights(outs: torch.Tensor) -> torch.Tensor:
    """The weights a probe's outputs (B, H, L, d) carry: (B, H, L, L), query t's weight on token s."""
    return outs[..., : outs.shape[-2]]
