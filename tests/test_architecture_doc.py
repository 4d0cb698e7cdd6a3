"""docs/architecture.md names files as it walks through the code: each one must exist, so the map stays true."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"


def test_every_file_the_architecture_page_names_exists():
    named = set(re.findall(r"`((?:specviz|tests)/[\w/]+\.py)`", DOC.read_text()))
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert len(named) > 20 and not missing, f"docs/architecture.md names files that do not exist: {missing}"


def the_map() -> str:
    """The page's drawing of the layers: its first code block."""
    return re.search(r"```\n(.*?)```", DOC.read_text(), re.DOTALL)[1]


def test_every_folder_of_the_package_is_on_the_map():
    """Each room and each folder inside one (ui/parts/, training/distill/, kernels/csrc/, …) is drawn as `name/`."""
    folders = sorted(
        path.relative_to(ROOT / "specviz").as_posix()
        for path in (ROOT / "specviz").rglob("*")
        if path.is_dir() and path.name != "__pycache__" and any(path.iterdir())
    )
    drawn = the_map()
    absent = [folder for folder in folders if not re.search(rf"(?<![\w/]){re.escape(folder.split('/')[-1])}/", drawn)]
    assert len(folders) > 10 and not absent, f"docs/architecture.md's map leaves out the folders {absent}"
    assert re.search(r"(?<![\w/])parts/", "the page: parts/ (each part)") and not re.search(r"(?<![\w/])parts/", "ui/parts")
