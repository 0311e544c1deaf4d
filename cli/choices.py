"""The choices the commands offer, in one place (literal, so that `--help` imports nothing heavy)."""

SANDBOXES = ("auto", "docker", "bwrap", "none")           # lumen_ex.sandbox.select.CHOICES
DEVICES = ("auto", "cpu", "cuda")                         # lumen_ex.check.DEVICES
FORMATS = ("json", "junit", "gradescope", "github", "prairielearn")   # lumen_ex.formats.NAMES
CHECK_FORMATS = ("rich", *FORMATS)                        # `check` also draws for people
