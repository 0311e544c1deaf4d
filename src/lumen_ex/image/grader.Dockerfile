# The lumen-ex grader image: Python, torch, lumen-ex (hidden suites and reference included), and one
# entry point that grades one exercise of a workspace mounted read-only at /workspace and writes the
# result document to /results/result.json. See docs/docker.md for the contract and the guarantees.
# The same image is a Gradescope autograder (/autograder/run_autograder) and a PrairieLearn external
# grader (entry point lumen-ex-platform prairielearn): docs/classroom.md.
#
# Build it with `lumen-ex image build` (it makes the build context: this file and a wheelhouse of
# every Python package, so the build itself needs no network: `docker build --network none`).
# BASE must provide python3 (3.11, matching the wheelhouse) with the venv module: python:3.11-slim,
# or a local Debian made by `lumen-ex image base` where no registry is reachable.
ARG BASE=python:3.11-slim

# -- third-party packages (torch ...), in a venv; cached until the wheelhouse changes ------------
FROM ${BASE} AS deps
COPY wheelhouse/deps /wheelhouse/deps
RUN python3 -m venv /opt/lumen/venv \
 && /opt/lumen/venv/bin/python -m pip install --no-index --no-deps --no-cache-dir \
        --disable-pip-version-check /wheelhouse/deps/*.whl

# -- the grader -----------------------------------------------------------------------------------
FROM ${BASE}
COPY --from=deps /opt/lumen/venv /opt/lumen/venv
COPY wheelhouse/lumen /wheelhouse/lumen
# lumen-ex itself, installed from its wheel (not editable); its entry points run as `python -IB`
# (isolated: no current folder on sys.path, no PYTHON* variables, no user site; no .pyc written),
# so nothing in a platform's working folder or environment is imported (src/lumen_ex/core/trusted.py).
# Then the two users:
#   root          the harness (trusted). docker leaves it only SETUID, SETGID and KILL.
#   lumen-worker  runs the learner's code (untrusted), uid 61001, no home, no shell, no groups.
# The worker's user may read only what the worker needs: the Python runtime, torch, and
# lumen_ex/sandbox/inside (worker.py, wire.py and wire's parts, and the zygote of a grading slot:
# src/lumen_ex/sandbox/docker_slot.py), linked at /opt/lumen/inside. The rest of lumen-ex (hidden suites, reference, harness),
# its install record, and /results (the mount point of the results directory) are root's alone.
RUN set -eu \
 && /opt/lumen/venv/bin/python -m pip install --no-index --no-deps --no-cache-dir \
        --disable-pip-version-check /wheelhouse/lumen/*.whl \
 && rm -rf /wheelhouse \
 && for script in lumen-ex lumen-ex-container lumen-ex-platform; do \
        sed -i '1s|^#!.*$|#!/opt/lumen/venv/bin/python -IB|' "/opt/lumen/venv/bin/$script"; \
        head -n 1 "/opt/lumen/venv/bin/$script" | grep -qx '#!/opt/lumen/venv/bin/python -IB'; \
    done \
 && /opt/lumen/venv/bin/python -m pip uninstall --yes --quiet pip \
 && echo 'lumen-worker:x:61001:61001:lumen-ex learner code:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'lumen-worker:x:61001:' >> /etc/group \
 && site=$(/opt/lumen/venv/bin/python -c 'import lumen_ex, os; print(os.path.dirname(os.path.dirname(lumen_ex.__file__)))') \
 && chmod -R go-rwx "$site/lumen_ex" "$site"/lumen_ex-*.dist-info \
 && chmod go+x "$site/lumen_ex" \
 && chmod go+x "$site/lumen_ex/sandbox" \
 && chmod -R go+rX "$site/lumen_ex/sandbox/inside" \
 && ln -s "$site/lumen_ex/sandbox/inside" /opt/lumen/inside \
 && mkdir -p /workspace /results /run/lumen /autograder \
 && printf '%s\n' '#!/bin/sh' '# Gradescope runs this once per submission: docs/classroom.md, "On Gradescope".' \
        'cd /' 'exec /opt/lumen/venv/bin/lumen-ex-platform gradescope "$@"' > /autograder/run_autograder \
 && chmod 0755 /autograder/run_autograder \
 && chmod 0700 /results /run/lumen \
 && chmod 0755 /workspace

ENV PATH=/opt/lumen/venv/bin:/usr/local/bin:/usr/bin:/bin \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1
WORKDIR /run/lumen
ENTRYPOINT ["/opt/lumen/venv/bin/lumen-ex-container"]
