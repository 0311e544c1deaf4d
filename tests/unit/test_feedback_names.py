"""Feedback files are titled with the student's name as given, as the gradebook shows it, not the
key their folder is stored under (src/lumen_ex/classroom/feedback_files.py)."""

from __future__ import annotations

from lumen_ex.classroom.feedback_files import html_feedback, markdown_feedback
from lumen_ex.classroom.gradebook import StudentRow


def test_the_title_is_the_name_as_given_and_neutralised():
    row = StudentRow("Jose_Garcia", {}, total=3.0, max_total=10.0, name="José García")
    assert markdown_feedback(row, [], None).startswith("# Feedback for José García\n")
    assert "<h1>Feedback for José García</h1>" in html_feedback(row, [], None)
    hostile = StudentRow("x", {}, name="<script>alert(1)</script>")
    assert "<script>" not in html_feedback(hostile, [], None)


def test_without_a_name_the_key_stands_in():
    assert markdown_feedback(StudentRow("trent", {}), [], None).startswith("# Feedback for trent\n")
