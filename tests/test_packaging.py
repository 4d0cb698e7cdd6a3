"""specviz installs as a Python package: `pip install .`, then `specviz --help` anywhere, and the installed copy finds
its catalogue, its bundled models and its data without the checkout (pyproject.toml, setup.py).

The quick tests hold pyproject.toml to what the repository already says (requirements.txt, requirements-dev.txt, the
oldest Python, `python -m specviz`) and check that every data file under specviz/ is in the wheel's globs; the slow
one installs a copy of the checkout into a fresh virtual environment and runs it from elsewhere.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirement_lines(path: Path) -> set[str]:
    """A requirements file's requirements, normalised (comments, blank lines and `-r` includes left out)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {normalised(line) for line in lines if line and not line.startswith("-")}


def normalised(requirement: str) -> str:
    parsed = Requirement(requirement)
    return f"{parsed.name.lower().replace('_', '-')}{parsed.specifier}"


def test_the_dependencies_are_requirements_txt():
    """requirements.txt stays the Space's list; pyproject.toml must say the same, or `pip install .` and the Space
    would run different libraries."""
    declared = {normalised(line) for line in PROJECT["project"]["dependencies"]}
    listed = requirement_lines(ROOT / "requirements.txt")
    assert declared == listed, f"only in pyproject.toml: {declared - listed}; only in requirements.txt: {listed - declared}"


def test_the_dev_extra_is_requirements_dev_txt():
    declared = {normalised(line) for line in PROJECT["project"]["optional-dependencies"]["dev"]}
    listed = requirement_lines(ROOT / "requirements-dev.txt")
    assert declared == listed, f"only in pyproject.toml: {declared - listed}; only in requirements-dev.txt: {listed - declared}"
    assert "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text(), "the dev list installs the app's first"


def test_the_oldest_python_is_stated_once_and_every_module_parses_for_it():
    """requires-python is true: ruff checks the code for that version, and every module parses in its grammar."""
    oldest = re.fullmatch(r">=3\.(\d+)", PROJECT["project"]["requires-python"])
    assert oldest, f"requires-python should read >=3.N, not {PROJECT['project']['requires-python']!r}"
    minor = int(oldest[1])
    assert PROJECT["tool"]["ruff"]["target-version"] == f"py3{minor}", "ruff's target-version must match requires-python"
    newer = []
    for path in [ROOT / "app.py", *sorted((ROOT / "specviz").rglob("*.py"))]:
        try:
            ast.parse(path.read_text(), filename=str(path), feature_version=(3, minor))
        except SyntaxError as error:
            newer.append(f"{path.relative_to(ROOT)}:{error.lineno}: {error.msg}")
    assert not newer, f"syntax newer than Python 3.{minor}: {newer}"


def test_the_console_script_is_what_python_m_specviz_runs():
    scripts = PROJECT["project"]["scripts"]
    assert scripts == {"specviz": "specviz.cli:main"}, scripts
    assert "from specviz.cli import main" in (ROOT / "specviz" / "__main__.py").read_text()


def test_every_data_file_under_specviz_is_in_the_wheel():
    """The code reads some files beside itself (prompt sets, a kernel's C++ source): each must match pyproject's
    package-data globs, or the installed package would lack it. (models.yaml and assets/ are copied by setup.py.)"""
    globs = PROJECT["tool"]["setuptools"]["package-data"]["specviz"]
    package = ROOT / "specviz"
    left_out = []
    for path in package.rglob("*"):
        if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
            continue
        relative = path.relative_to(package).as_posix()
        if not any(fnmatch.fnmatch(relative, glob) or fnmatch.fnmatch(relative, glob.removeprefix("**/")) for glob in globs):
            left_out.append(relative)
    assert not left_out, f"files under specviz/ that the wheel would leave out (add a glob to package-data): {left_out}"


def source_copy(destination: Path) -> Path:
    """The checkout's files as git sees them (tracked, plus new files not ignored), copied: what a clone would hold,
    without the build folders an install would leave in the checkout."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_pip_install_then_specviz_and_the_app_run_from_a_fresh_environment(tmp_path):
    """`pip install .` in a fresh virtual environment (torch and the rest, pip and setuptools too, from this one's
    site-packages, so nothing is downloaded; the package itself with --no-deps), then from a folder outside the checkout: `specviz --help`, the
    installed package (not the checkout) with its catalogue, bundled models, prompts and kernel source, a real
    `specviz run --json` on the bundled pair, and `python app.py` serving its page."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("copies the checkout with git")
    from importlib.metadata import version

    assert int(version("setuptools").split(".")[0]) >= 77, "pip install -r requirements-dev.txt brings setuptools>=77"
    source = source_copy(tmp_path / "source")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPECVIZ_CATALOGUE", "VIRTUAL_ENV")}
    environment.update(SPECVIZ_CACHE=str(tmp_path / "cache"), PATH=f"{venv / 'bin'}{os.pathsep}{environment['PATH']}")
    installed = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", str(source)],
        capture_output=True, text=True, env=environment, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*command: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(command, cwd=elsewhere, capture_output=True, text=True, env=environment, timeout=timeout)

    helped = run(str(venv / "bin" / "specviz"), "--help")
    assert helped.returncode == 0 and "run" in helped.stdout and "bench" in helped.stdout, helped.stderr
    facts = run(
        str(python), "-c",
        "import json, specviz; from pathlib import Path; from specviz.models.catalogue import CATALOGUE_PATH, load_catalogue;"
        "from specviz.prompts.sets import PROMPTS; c = load_catalogue(); package = Path(specviz.__file__).parent;"
        "print(json.dumps({'package': str(package), 'catalogue': str(CATALOGUE_PATH), 'default': c.default,"
        " 'bundled': c.get(c.default).bundled, 'prompt_sets': len(PROMPTS),"
        " 'kernel_sources': [str(p) for p in package.rglob('csrc/*.cpp')]}))",
    )  # fmt: skip
    assert facts.returncode == 0, facts.stderr[-3000:]
    found = json.loads(facts.stdout)
    package = Path(found["package"])
    assert package.is_relative_to(venv) and not package.is_relative_to(source), f"imported from {package}, not the install"
    assert Path(found["catalogue"]).is_relative_to(package), f"the catalogue read was {found['catalogue']}"
    assert found["bundled"], f"the default pair {found['default']} does not find its bundled models in the install"
    assert found["prompt_sets"] and found["kernel_sources"], found
    ran = run(
        str(venv / "bin" / "specviz"), "run", "--prompt", "def main():\n", "--max-new-tokens", "6", "--gamma", "2", "--json"
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert len(json.loads(ran.stdout)["new_token_ids"]) == 6

    port = free_port()
    app = subprocess.Popen(
        [python, str(source / "app.py")], cwd=source, env={**environment, "GRADIO_SERVER_PORT": str(port)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        started, served = time.monotonic(), None
        while served is None and time.monotonic() - started < 120 and app.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    served = response.status
            except OSError:
                time.sleep(0.5)
    finally:
        app.terminate()
        try:
            said = app.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            app.kill()
            said = app.communicate()[1]
    assert served == 200, f"python app.py did not serve its page; it said: {said[-3000:]}"
