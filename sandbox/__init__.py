"""Sandbox backends behind one interface (sandbox/base.py): bwrap, docker, and unisolated."""
