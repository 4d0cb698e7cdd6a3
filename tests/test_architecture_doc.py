"""docs/architecture.md names files as it walks through the code: each one must exist, so the map stays true."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"


def test_every_file_the_architecture_page_names_exists():
    named = set(re.findall(r"`((?:specviz|tests)/[\w/]+\.py)`", DOC.read_text()))
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert len(named) > 20 and not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_room_of_the_package_is_on_the_page():
    rooms = {path.name for path in (ROOT / "specviz").iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    text = DOC.read_text()
    absent = sorted(room for room in rooms if f" {room}/" not in text)
    assert rooms and not absent, f"docs/architecture.md leaves out the rooms {absent}"
