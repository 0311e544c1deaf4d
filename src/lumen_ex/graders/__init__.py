"""What every hidden suite shares: seeded inputs, staged expectations with tolerances and named
mistakes, axis names (support/), and the only pytest configuration suites run with (pytest.ini).

The suites themselves live in their exercises' folders (src/lumen_ex/exercises/<NN-slug>/suite/, or
an instructor's pack) and import this through the author facade, src/lumen_ex/author.py. They reach
the learner's code only through the ``submission`` fixture (src/lumen_ex/harness/proxy.py), compute
ground truth with their exercise's reference.py in float64 on the CPU, and fail with structured
diagnoses (src/lumen_ex/graders/support/expect.py). They run in the trusted harness, never inside the sandbox.
"""
