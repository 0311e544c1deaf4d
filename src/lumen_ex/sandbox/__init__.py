"""Sandbox backends behind one interface (src/lumen_ex/sandbox/base.py): bwrap, docker, and unisolated."""
