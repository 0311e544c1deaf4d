"""What one sandboxed worker may use: data of an exercise's contract (the catalogue sets it),
enforced by lumen_ex.sandbox.cgroups."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one worker may use. Defaults suit the exercises; the catalogue may override them."""

    memory_mb: int = 2048
    processes: int = 64
    cpu_seconds: int = 120
    tmp_mb: int = 64
    file_mb: int = 16
    open_files: int = 256
