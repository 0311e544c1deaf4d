"""The trusted harness (pytest, hidden suites, reference, results) and the worker it talks to.

``wire.py`` and ``worker.py`` are the only files that are ever visible inside a sandbox.
"""
