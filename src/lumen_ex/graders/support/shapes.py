"""Axis names for shapes, so feedback can say "(B, H, d_v, L_q)" instead of "(2, 3, 6, 5)".

Hidden inputs give every axis a distinct size, so a size identifies its axis.
"""

from __future__ import annotations

from typing import Sequence


def name_shape(shape: Sequence[int], sizes: dict[str, int]) -> tuple[str, ...]:
    """Name each dimension by the axis whose size it has ('?' when no axis or several have it)."""
    by_size: dict[int, list[str]] = {}
    for name, size in sizes.items():
        by_size.setdefault(size, []).append(name)
    names = []
    for size in shape:
        owners = by_size.get(size, [])
        names.append(owners[0] if len(owners) == 1 else str(size) if not owners else "?")
    return tuple(names)


def axis_index(axes: Sequence[str], name: str) -> int | None:
    return list(axes).index(name) if name in axes else None
