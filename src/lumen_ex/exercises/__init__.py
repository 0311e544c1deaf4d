"""The built-in exercise pack (src/lumen_ex/core/packs.py reads it; docs/authoring.md describes it).

Its folders are data, not modules: ``lumen-ex init`` copies each stub and README into a learner's
workspace, and the harness hands each suite/ folder to pytest. This file only makes the pack
findable as package data.
"""
