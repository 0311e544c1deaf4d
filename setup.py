"""Only what pyproject.toml cannot say: a wheel (or any build) bundles the playground's page first.

``build_py`` runs ``npm ci`` and ``npm run build`` in frontend/ when the bundle
(src/lumen_ex/playground/static) is missing and npm is present, so ``pip wheel .`` ships it. Without
npm the build goes on without the page, and ``lumen-ex serve`` says how to add it (install.sh does
the same build for a checkout).
"""

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithPlayground(build_py):
    def run(self):
        bundle = HERE / "src" / "lumen_ex" / "playground" / "static" / "app.js"
        frontend = HERE / "frontend"
        if not bundle.exists() and (frontend / "package-lock.json").exists() and shutil.which("npm"):
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=frontend, check=True)
            subprocess.run(["npm", "run", "--silent", "build"], cwd=frontend, check=True)
        super().run()


setup(cmdclass={"build_py": BuildWithPlayground})
