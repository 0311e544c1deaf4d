"""Tools for exercise authors: ``lumen-ex dev new`` (scaffold.py) and ``lumen-ex dev check``
(devcheck.py), and the corpus files' header format (corpus.py). docs/authoring.md is the guide."""
