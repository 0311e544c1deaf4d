"""Reference solutions: small, device- and dtype-agnostic PyTorch that the hidden suites grade against.

Each module is standalone (torch and math only), so the same file can also be dropped into a
workspace as a submission: the catalogue test does exactly that and requires a full score.
Ground truth is always computed from float64 CPU copies of the inputs (src/lumen_ex/graders/support/inputs.py).
"""
