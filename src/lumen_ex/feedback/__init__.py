"""Pure views of one result record: the file formats (JSON, JUnit, Gradescope, GitHub, PrairieLearn),
text and pictures. Each view neutralises the untrusted text it writes (lumen_ex.core.untrusted)."""
