"""Learner-facing exercise material: the catalogue, and one folder per exercise (stub + README).

The folders are data, not modules: ``lumen-ex init`` copies them into a learner's workspace.
"""
