"""The hidden suites: plain pytest files, one package per exercise.

They reach the learner's code only through the ``submission`` fixture (src/lumen_ex/harness/proxy.py), compute
ground truth with lumen_ex.reference in float64 on the CPU, and fail with structured diagnoses
(src/lumen_ex/graders/support/expect.py). They run in the trusted harness, never inside the sandbox.
"""
