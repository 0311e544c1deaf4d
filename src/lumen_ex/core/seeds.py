"""Seeds of the hidden inputs: chosen, or checked, in one place for every sandbox and entry point.

A seed is a whole number from 0 to 2**32 - 1 (what torch, numpy and the result schema all accept).
Without one, a random seed is chosen; it is printed with every result, so ``--seed`` reproduces it.
"""

from __future__ import annotations

import secrets

from lumen_ex.core.errors import UsageError

MAX_SEED = 2**32 - 1


def choose(seed: int | str | None) -> int:
    """``seed`` checked (a :class:`UsageError` in one line when it is not a seed), or a random one."""
    if seed is None:
        return secrets.randbelow(2**31)
    try:
        value = int(seed)
    except (TypeError, ValueError):
        raise UsageError(f"--seed {str(seed)[:40]!r} is not a whole number",
                         f"Use a seed from 0 to {MAX_SEED}, or leave it out for a random one") from None
    if isinstance(seed, bool) or not 0 <= value <= MAX_SEED or (isinstance(seed, float) and seed != value):
        raise UsageError(f"--seed {str(seed)[:40]} is out of range",
                         f"Use a seed from 0 to {MAX_SEED}, or leave it out for a random one")
    return value
