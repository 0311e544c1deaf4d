"""``lumen-ex init DIR --ci github``: the GitHub Actions workflow of a student repository.

The workflow installs the CPU build of torch and then lumen-ex, checks every exercise with
``--format github`` (annotations on the learner's file, a job summary with the score, and the
GitHub Classroom runner result as the step output ``result``), and, when the repository variable
``LUMEN_EX_CLASSROOM`` is ``true``, hands those results to GitHub Classroom's reporter action.

What a real runner needs from it (tests/e2e/test_platform_contracts.py validates it against the
github-workflow JSON Schema that check-jsonschema vendors from schemastore):

- the names GitHub Classroom looks for: the workflow is ``Autograding Tests`` and the job
  ``run-autograding-tests`` (the names of the workflow GitHub Classroom itself generates,
  docs/classroom.md, Output formats), so the reporter's check run is found;
- no ``cache: pip`` on ``actions/setup-python``: that cache needs a requirements or pyproject file
  to key on and fails the step when the repository has none, as a student repository made by
  ``lumen-ex init`` has none; the downloads are the CPU build of torch and lumen-ex, nothing else;
- an install line that exists: lumen-ex is not on a public package index, so where it comes from
  is the course's to say: ``lumen-ex init --ci github --lumen-ex-spec SPEC`` writes it in (a git URL
  such as ``git+https://github.com/ORG/lumen-ex@v0.1.0``, or a wheel's URL), and the repository or
  organisation variable ``LUMEN_EX_SPEC`` overrides it. Without either, the install step fails with
  an error annotation that says which variable to set, instead of a pip error.

These checks run in CI that the student controls, so their score is feedback, not a grade:
docs/classroom.md says what to use for grading.
"""

from __future__ import annotations

import re
from pathlib import Path

from lumen_ex import __version__
from lumen_ex.core.catalog import Catalog
from lumen_ex.core.errors import UsageError

WORKFLOW = Path(".github") / "workflows" / "lumen-ex.yml"
WORKFLOW_NAME = "Autograding Tests"         # what GitHub Classroom looks for
JOB_ID = "run-autograding-tests"
_SPEC = re.compile(r"[A-Za-z0-9_.+:/@#=~%-]+")   # a pip requirement or URL, nothing YAML or the shell reads
REPORTER = "classroom-resources/autograding-grading-reporter@v1"

HEADER = """\
# lumen-ex: check every exercise on each push. Failing tests become annotations on your file, the
# score is in the job summary. Written by `lumen-ex init --ci github` (lumen-ex {version}).
#
# These checks run in CI that you control: the score is feedback for you, not a grade. Your
# instructor grades with the hidden tests in the lumen-ex grader image (docs/classroom.md).
#
# Repository or organisation variables (Settings > Secrets and variables > Actions > Variables):
#   LUMEN_EX_SPEC        where to install lumen-ex from: a git URL such as
#                        git+https://github.com/ORG/lumen-ex@v0.1.0, or a wheel's URL{default_note}
#   LUMEN_EX_CLASSROOM   true: also report the points to GitHub Classroom
#
# The workflow and job names are the ones GitHub Classroom looks for: keep them.
name: Autograding Tests

on:
  push:
  pull_request:
  workflow_dispatch:
  repository_dispatch:

permissions:
  contents: read
  checks: write        # only the GitHub Classroom reporter writes a check run
  actions: read

jobs:
  run-autograding-tests:
    runs-on: ubuntu-latest
    timeout-minutes: 30
    if: github.actor != 'github-classroom[bot]'
    env:
      LUMEN_EX_SPEC: ${{{{ vars.LUMEN_EX_SPEC || '{spec}' }}}}
      PIP_DISABLE_PIP_VERSION_CHECK: "1"
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install torch (CPU build), then lumen-ex
        id: install
        run: |
          python -m pip install torch --index-url https://download.pytorch.org/whl/cpu
          if [ -z "$LUMEN_EX_SPEC" ]; then echo "::error title=lumen-ex is not installed::Set the repository or organisation variable LUMEN_EX_SPEC to where lumen-ex is installed from (for example git+https://github.com/ORG/lumen-ex@v0.1.0)"; exit 1; fi
          python -m pip install "$LUMEN_EX_SPEC"
      - name: Install the bubblewrap sandbox
        run: |
          sudo apt-get update -q && sudo apt-get install -y -q bubblewrap
          # Ubuntu 24.04 runners forbid unprivileged user namespaces, which bubblewrap needs.
          sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 || true
          lumen-ex doctor
"""

STEP = """\
      - name: "Exercise {number}: {title}"
        id: {step}
        if: ${{{{ !cancelled() && steps.install.outcome == 'success' }}}}
        run: lumen-ex check {number} --format github --device cpu
"""

REPORT = """\
      - name: Report the points to GitHub Classroom
        if: ${{{{ !cancelled() && vars.LUMEN_EX_CLASSROOM == 'true' }}}}
        uses: {reporter}
        env:
{env}
        with:
          runners: {runners}
"""


def step_id(number: int) -> str:
    """A step id whose upper-case form is a plain environment name (the reporter reads ``<ID>_RESULTS``)."""
    return f"exercise{number}"


def check_spec(spec: str) -> str:
    """``spec`` if it is a plain pip requirement or URL (written into YAML and a shell line)."""
    if spec and not _SPEC.fullmatch(spec):
        raise UsageError(f"--lumen-ex-spec {spec!r} is not a plain package name or URL",
                         "Pass e.g. git+https://github.com/ORG/lumen-ex@v0.1.0")
    return spec


def github_workflow(catalog: Catalog, spec: str = "") -> str:
    note = f" (default here: {spec})" if spec else " (required)"
    text = HEADER.format(version=__version__, spec=check_spec(spec), default_note=note)
    for ex in catalog.exercises:
        text += STEP.format(number=ex.number, title=ex.title.replace('"', "'"), step=step_id(ex.number))
    env = "\n".join(f'          {step_id(ex.number).upper()}_RESULTS: "${{{{ steps.{step_id(ex.number)}.outputs.result }}}}"'
                    for ex in catalog.exercises)
    text += REPORT.format(reporter=REPORTER, env=env, runners=",".join(step_id(ex.number) for ex in catalog.exercises))
    return text


def write_ci(root: Path, ci: str, catalog: Catalog, spec: str = "") -> Path:
    """Write the CI configuration ``ci`` (only ``github``) into the workspace ``root``; ``spec`` is
    where the workflow installs lumen-ex from (the variable LUMEN_EX_SPEC overrides it)."""
    path = Path(root) / WORKFLOW
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(github_workflow(catalog, spec))
    gitignore = Path(root) / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text(".lumen-ex/\n__pycache__/\n")
    return path
