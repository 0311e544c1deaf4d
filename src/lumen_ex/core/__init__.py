"""The bottom layer: the result record, verdicts and scores, errors, the catalogue and the options
every other part shares. It imports nothing else of lumen-ex (docs/architecture.md)."""
