"""Views of one result record: the file formats (JSON, JUnit, Gradescope, GitHub, PrairieLearn),
text and pictures. Each view neutralises the untrusted text it writes (lumen_ex.core.untrusted).

They read nothing but the record, with two exceptions that look the record's exercise up in the
catalogue: the learner's file path (text.py ``exercise_path``) and the Gradescope visibility of each
scoring group (formats/gradescope.py ``group_visibility``); an exercise not found there gives ""
and "visible"."""
