"""The package's rooms (the folders of specviz/) import in one direction: no loop between rooms, nor between two
modules of one room, imports inside functions included, and few loose modules at the root (docs/architecture.md
draws the layers)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "specviz"
MAX_ROOT_MODULES = 8  # __init__ and __main__ included


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every specviz module a file imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import, resolved against this module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("specviz.")}


def room_of(module: str) -> str | None:
    """specviz.engine.kv_cache -> engine; a module at the root (specviz.numbers) is a room of its own."""
    name = module.split(".")[1]
    return name if (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file() else None


def module_imports(package: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """(from module, to module) -> the file that imports, for every pair of different specviz modules."""
    files = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        files[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    edges = defaultdict(list)
    for module, (path, is_package) in files.items():
        if module == "specviz":
            continue
        for target in imported_modules(ast.parse(path.read_text()), module, is_package):
            if target in files and target != module:
                edges[(module, target)].append(str(path.relative_to(package.parent)))
    return edges


def room_imports(package: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """(from room, to room) -> the files that import across, for every pair of different rooms."""
    edges = defaultdict(list)
    for (module, target), files in module_imports(package).items():
        source, destination = room_of(module), room_of(target)
        if destination and destination != source:
            edges[(source, destination)].extend(files)
    return edges


def loops(edges: dict[tuple[str, str], list[str]]) -> list[set[str]]:
    """The rooms that reach each other (strongly connected, more than one room)."""
    reach = defaultdict(set)
    for source, destination in edges:
        reach[source].add(destination)
    rooms = set(reach) | {d for targets in reach.values() for d in targets}
    closure = {room: set(reach[room]) for room in rooms}
    for middle in rooms:  # Floyd–Warshall on reachability: 20 rooms at most
        for room in rooms:
            if middle in closure[room]:
                closure[room] |= closure[middle]
    found = []
    for room in sorted(rooms):
        group = {room} | {other for other in closure[room] if room in closure[other]}
        if len(group) > 1 and group not in found:
            found.append(group)
    return found


def test_no_loop_between_rooms():
    edges = room_imports()
    found = loops(edges)
    lines = [
        f"{sorted(group)}: " + "; ".join(f"{a} -> {b} ({edges[(a, b)][0]})" for a in group for b in group if (a, b) in edges)
        for group in found
    ]
    assert not found, "rooms that import each other:\n" + "\n".join(lines)


def test_no_loop_between_modules():
    edges = module_imports()
    found = loops(edges)
    lines = [f"{sorted(group)}: " + "; ".join(f"{a} -> {b}" for a in group for b in group if (a, b) in edges) for group in found]
    assert not found, "modules that import each other (move what both need into a module of its own):\n" + "\n".join(lines)


def test_the_module_loop_check_finds_a_planted_loop(tmp_path):
    room = tmp_path / "specviz" / "room"
    room.mkdir(parents=True)
    (room / "__init__.py").write_text("")
    (room / "a.py").write_text("from specviz.room.b import f\n")
    (room / "b.py").write_text("def f():\n    from specviz.room import a\n")
    assert loops(module_imports(tmp_path / "specviz")) == [{"specviz.room.a", "specviz.room.b"}]


def test_the_loop_check_finds_a_planted_loop(tmp_path):
    planted = tmp_path / "specviz"
    for room, imports in {"low": "", "high": "from specviz.low import a\n"}.items():
        (planted / room).mkdir(parents=True)
        (planted / room / "__init__.py").write_text("")
        (planted / room / "a.py").write_text(imports + "def f():\n    from specviz.high import a\n" * (room == "low"))
    global PACKAGE
    saved, PACKAGE = PACKAGE, planted
    try:
        assert loops(room_imports(planted)) == [{"high", "low"}]
    finally:
        PACKAGE = saved


def test_few_modules_at_the_root():
    root_modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(root_modules) <= MAX_ROOT_MODULES, root_modules
