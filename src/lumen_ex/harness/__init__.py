"""One check's trusted pipeline: snapshot the learner's file, launch a sandboxed worker, run the
hidden pytest suite against it through a proxy, and assemble the result record (check.py).

The worker and its wire format live in lumen_ex/sandbox/inside: the only files a sandbox sees.
"""
