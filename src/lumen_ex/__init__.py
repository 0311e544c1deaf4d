"""lumen-ex: autograded exercises for learning how transformers work.

Learners edit stub files; ``lumen-ex check`` runs hidden pytest suites against a PyTorch reference,
with the learner's code imported only by a sandboxed worker process.
"""

__version__ = "0.1.0"
