"""``lumen-ex init DIR --ci github``: the GitHub Actions workflow of a student repository.

The workflow installs the CPU build of torch and then lumen-ex, checks every exercise with
``--format github`` (annotations on the learner's file, a job summary with the score, and the
GitHub Classroom runner result as the step output ``result``), and, when the repository variable
``LUMEN_EX_CLASSROOM`` is ``true``, hands those results to GitHub Classroom's reporter action.

Where lumen-ex is installed from is the repository (or organisation) variable ``LUMEN_EX_SPEC``: a
package name, or a git URL such as ``git+https://github.com/ORG/lumen-ex@v0.1.0``; it defaults to
``lumen-ex``. These checks run in CI that the student controls, so their score is feedback, not a
grade: docs/classroom.md says what to use for grading.
"""

from __future__ import annotations

from pathlib import Path

from .catalog import Catalog

WORKFLOW = Path(".github") / "workflows" / "lumen-ex.yml"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"

HEADER = """\
# lumen-ex: check every exercise on each push. Failing tests become annotations on your file, the
# score is in the job summary. Written by `lumen-ex init --ci github` (lumen-ex {version}).
#
# These checks run in CI that you control: the score is feedback for you, not a grade. Your
# instructor grades with the hidden tests in the lumen-ex grader image (docs/classroom.md).
#
# Repository or organisation variables (Settings > Secrets and variables > Actions > Variables):
#   LUMEN_EX_SPEC        where to install lumen-ex from: a package name or a git URL, for example
#                        git+https://github.com/ORG/lumen-ex@v0.1.0 (default: lumen-ex)
#   LUMEN_EX_CLASSROOM   true: also report the points to GitHub Classroom
name: lumen-ex

on:
  push:
  pull_request:
  workflow_dispatch:

permissions:
  contents: read
  checks: write        # only the GitHub Classroom reporter writes a check run
  actions: read

jobs:
  check:
    runs-on: ubuntu-latest
    timeout-minutes: 30
    if: github.actor != 'github-classroom[bot]'
    env:
      LUMEN_EX_SPEC: ${{{{ vars.LUMEN_EX_SPEC || 'lumen-ex' }}}}
      PIP_DISABLE_PIP_VERSION_CHECK: "1"
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
          cache: pip
      - name: Install torch (CPU build), then lumen-ex
        id: install
        run: |
          python -m pip install torch --index-url https://download.pytorch.org/whl/cpu
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


def github_workflow(catalog: Catalog) -> str:
    from lumen_ex import __version__

    text = HEADER.format(version=__version__)
    for ex in catalog.exercises:
        text += STEP.format(number=ex.number, title=ex.title.replace('"', "'"), step=step_id(ex.number))
    env = "\n".join(f'          {step_id(ex.number).upper()}_RESULTS: "${{{{ steps.{step_id(ex.number)}.outputs.result }}}}"'
                    for ex in catalog.exercises)
    text += REPORT.format(reporter=REPORTER, env=env, runners=",".join(step_id(ex.number) for ex in catalog.exercises))
    return text


def write_ci(root: Path, ci: str, catalog: Catalog) -> Path:
    """Write the CI configuration ``ci`` (only ``github``) into the workspace ``root``."""
    path = Path(root) / WORKFLOW
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(github_workflow(catalog))
    gitignore = Path(root) / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text(".lumen-ex/\n__pycache__/\n")
    return path
