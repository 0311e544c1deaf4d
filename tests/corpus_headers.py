"""The header of a corpus submission: its leading ``# key: value`` comment lines (the format is the
library's, src/lumen_ex/authoring/corpus.py; the tests and benches import it from here)."""

from lumen_ex.authoring.corpus import headers  # noqa: F401 (re-exported)
