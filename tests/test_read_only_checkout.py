"""specviz runs from a checkout it cannot write to (a container image, a packaged Space): every cache is specviz's.

The tracked files are copied to a fresh folder and made read-only; `python -m specviz run` and the app then run from
it with an empty cache of their own. Tests run as root here, and root writes through read-only modes, so the test also
lists every file of the copy (path, size, modification time) before and after: nothing may appear or change.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.browser import ROOT, free_port, start_app, stop_app

RUN = dict(prompt="def add(a, b):", max_new_tokens=4, gamma=2)


def tracked_copy(destination: Path) -> Path:
    """The repository's tracked files (what a clone or an image holds), read-only."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    for path in sorted(destination.rglob("*"), reverse=True):  # files first, then their folders
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    destination.chmod(destination.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return destination


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns) for path in folder.rglob("*")}


@pytest.fixture(scope="module")
def read_only(tmp_path_factory):
    checkout = tracked_copy(tmp_path_factory.mktemp("checkout"))
    cache = tmp_path_factory.mktemp("cache")
    env = {**os.environ, "SPECVIZ_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(checkout)}
    before = listing(checkout)
    yield checkout, env
    for path in checkout.rglob("*"):  # writable again, so pytest can remove it
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    checkout.chmod(checkout.stat().st_mode | stat.S_IWUSR)
    after = listing(checkout)
    changed = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
    assert changed == [], f"specviz wrote into its checkout: {changed[:10]}"


def test_the_cli_runs_the_bundled_pair_from_a_read_only_checkout(read_only):
    checkout, env = read_only
    command = [sys.executable, "-m", "specviz", "run", "--pair", "pycode-distilled", "--json"]
    command += ["--prompt", RUN["prompt"], "--max-new-tokens", str(RUN["max_new_tokens"]), "--gamma", str(RUN["gamma"])]
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["summary"]["new_tokens"] == RUN["max_new_tokens"], result["summary"]


@pytest.mark.served
def test_the_app_serves_and_runs_from_a_read_only_checkout(read_only, tmp_path):
    from gradio_client import Client

    checkout, env = read_only
    port, log = free_port(), tmp_path / "app.log"
    process, _ = start_app(port, log=log, env={**env, "SPECVIZ_BACKGROUND_PAIRS": "0"}, cwd=checkout)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        request = dict(pair="pycode-distilled", temperature=0.0, top_k=0, top_p=1.0, seed=0, drafter="model")
        request |= dict(verification="exact", lenience=0.5, playback="real pace", **RUN)
        client.predict(api_name="/run_clicked", **request)
    finally:
        stop_app(process)
    said = log.read_text(errors="replace")
    assert "Traceback" not in said and "a handler failed" not in said, said[-3000:]
