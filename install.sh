#!/usr/bin/env bash
# Set up lumen-ex in ./.venv: the CPU build of torch where no torch is installed yet, lumen-ex itself
# (editable, with the test extras and Triton), bubblewrap (the sandbox) where we may install it, and the web
# playground's page (lumen-ex serve), built from frontend/ where Node.js and npm are present.
# Safe to run again: it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
VENV_PY=.venv/bin/python

if ! "$VENV_PY" -c "import torch" 2>/dev/null; then
    # An unpinned `torch` would resolve to a multi-GB CUDA build; take the CPU build instead.
    # For a GPU, install a CUDA build of torch into .venv first (https://pytorch.org/get-started/locally/).
    # Where PyTorch's CPU index is out of reach (air-gapped or registry-limited machines), fall
    # back to a pinned release, which some machines keep as a local CPU wheel.
    "$VENV_PY" -m pip install --quiet --timeout 5 --retries 0 \
            --index-url https://download.pytorch.org/whl/cpu torch 2>/dev/null \
        || "$VENV_PY" -m pip install --quiet torch==2.13.0
fi
# Exercise 14's Triton (a 286 MB download, about 1 GB installed; its interpreter grades kernels on the
# CPU): LUMEN_EX_NO_TRITON=1 leaves it out, and that exercise then says how to add it.
if [ -n "${LUMEN_EX_NO_TRITON:-}" ]; then
    "$VENV_PY" -m pip install --quiet -e '.[test]'
else
    "$VENV_PY" -m pip install --quiet -e '.[test,triton]' \
        || { echo "install.sh: could not install Triton (exercise 14); everything else is installed" >&2;
             "$VENV_PY" -m pip install --quiet -e '.[test]'; }
fi

if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get install -y -qq bubblewrap >/dev/null || echo "install.sh: could not install bubblewrap" >&2
    else
        echo "install.sh: no sandbox yet. Install one with: sudo apt-get install -y bubblewrap" >&2
    fi
fi
# The playground's page: `npm ci` installs exactly the lockfile's packages, `npm run build` bundles
# them into src/lumen_ex/playground/static (never committed). Skipped when the bundle is newer than
# every source of it.
BUNDLE=src/lumen_ex/playground/static/app.js
if command -v npm >/dev/null 2>&1; then
    if [ ! -f "$BUNDLE" ] || [ -n "$(find frontend -path frontend/node_modules -prune -o -type f -newer "$BUNDLE" -print | head -1)" ]; then
        (cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build) >/dev/null \
            || echo "install.sh: could not build the playground's page (frontend/): lumen-ex serve will say so" >&2
    fi
else
    echo "install.sh: no Node.js, so the playground's page (lumen-ex serve) is not built. Install Node.js 20" \
         "and npm (Debian: sudo apt-get install -y nodejs npm), then run ./install.sh again" >&2
fi
echo "lumen-ex is installed in .venv ($(.venv/bin/lumen-ex --version))"
