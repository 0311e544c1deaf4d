"""Grading a class: submissions, the result store, the batch scheduler and its grading processes,
gradebook and reports, deadlines, feedback files, Kubernetes and the grading platforms."""
