"""The README's test command on a fresh machine (issue 43): in a new virtual environment that holds only torch and
what requirements-dev.txt names, `python -m pytest` collects every test.

The machines CI ran on had scipy already, so a test that imported it passed there and stopped a new user's first
`python -m pytest` at collection ("Interrupted: 2 errors during collection"). Here the committed files are cloned, a
virtual environment is made without this one's packages, torch is installed as `.ci/run` installs it (the pinned CPU
build first, so pip does not pull a CUDA one), then `pip install -r requirements-dev.txt`, and the whole suite
(`-m ""`: quick and slow) is collected there and here: the same tests, and no error. Collecting imports every test
module, so a dependency no requirements file names fails here; running the suite a second time would add nothing
collection does not catch, and take as long again. Needs PyPI (or the index pip is configured with).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.browser import ROOT

pytestmark = pytest.mark.slow

INSTALL_TIMEOUT_S = 1800


def collected(python: Path | str, checkout: Path, env: dict[str, str]) -> Counter:
    """How many tests `python -m pytest` finds in each test file of the checkout (the assertion says why, if collection
    fails). Counted by file: pytest releases spell parameters with newlines or non-ASCII text differently in their ids."""
    command = [str(python), "-m", "pytest", "--collect-only", "-q", "-m", "", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, timeout=900)
    said = done.stdout + done.stderr
    assert done.returncode == 0, (  # 2: "Interrupted: N errors during collection"
        f"`{' '.join(command[1:])}` with {python} did not collect cleanly (exit {done.returncode}):\n{said[-4000:]}"
    )
    return Counter(line.split("::")[0] for line in done.stdout.splitlines() if "::" in line)


def test_the_requirements_alone_collect_every_test(tmp_path):
    checkout = tmp_path / "specviz"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(checkout)], check=True, timeout=600)
    torch_pin = re.search(r"torch==[\w.+]+", (checkout / ".ci" / "run").read_text()).group()  # .ci/run's own pin
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    for requirement in ([torch_pin], ["-r", "requirements-dev.txt"]):  # the README's order: torch, then the rest
        command = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirement]
        done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        assert done.returncode == 0, f"`pip install {' '.join(requirement)}` failed:\n{done.stderr[-3000:]}"

    fresh = collected(python, checkout, env)
    here = collected(sys.executable, checkout, env)
    differ = {name: (here[name], fresh[name]) for name in here | fresh if here[name] != fresh[name]}
    assert fresh and not differ, f"tests per file (here, fresh environment) differ: {differ}"
