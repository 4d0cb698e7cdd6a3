"""specviz is MIT-licensed, and everything it ships from another project carries that project's notice.

A vendored file is found by what its header says, wherever it lies: an origin line ("From torchao (https://…)"), or
words saying it was copied, vendored, adapted or ported. Every C/C++ file under specviz/ must say one or the other
(native code is where vendored code lives), or say it is specviz's own. A bundled model whose card says it started
from another model's layers is a derivative of that model. Each origin needs its section in THIRD_PARTY_NOTICES.md,
with its licence's text and the copyright line the file's header names.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTICES = ROOT / "THIRD_PARTY_NOTICES.md"
SEARCHED = ("specviz", "benchmarks", "assets", "tests")  # every folder that holds code we ship or run
NATIVE = {".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh"}
CODE = NATIVE | {".py", ".js", ".css", ".sh"}
ORIGIN = re.compile(r"\bFrom ([A-Za-z0-9][\w.-]*) \((https?://[^\s,)]+)")
SAYS_VENDORED = re.compile(r"\b(vendored (from|copy)|copied from|adapted from|ported from)\b", re.IGNORECASE)
SAYS_OURS = re.compile(r"specviz's own|written for specviz", re.IGNORECASE)
COPYRIGHT = re.compile(r"Copyright \(c\) (.+?)(?:, (?:BSD|MIT|Apache)|\.?\s*$)", re.MULTILINE)
LICENCE_TEXTS = {  # a licence named in a header → words only its full text has
    "BSD": "Redistribution and use in source and binary forms",
    "MIT": "Permission is hereby granted, free of charge",
    "Apache": "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
}


def header(path: Path) -> str:
    """The part of a file that says where it comes from: a Python module's docstring and leading comments, or the
    leading comment block of any other source file."""
    text = path.read_text(errors="replace")
    if path.suffix == ".py":
        try:
            docstring = ast.get_docstring(ast.parse(text)) or ""
        except SyntaxError:
            docstring = ""
        comments = "\n".join(line for line in text.splitlines()[:40] if line.lstrip().startswith("#"))
        return docstring + "\n" + comments
    lines = []
    for line in text.splitlines()[:60]:
        stripped = line.strip()
        if stripped.startswith(("//", "/*", "*", "#!")) or (stripped.startswith("#") and path.suffix == ".sh"):
            lines.append(stripped)
        elif stripped:
            break
    return "\n".join(lines)


def source_files() -> list[Path]:
    found = []
    for folder in SEARCHED:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in CODE and path.is_file() and "__pycache__" not in path.parts and path.stat().st_size < 2_000_000:
                found.append(path)
    return found


def notice_sections() -> dict[str, str]:
    """THIRD_PARTY_NOTICES.md's sections: heading → body."""
    parts = re.split(r"^## (.+)$", NOTICES.read_text(), flags=re.MULTILINE)
    return {heading.strip().lower(): body for heading, body in zip(parts[1::2], parts[2::2])}


def vendored_files() -> dict[Path, str]:
    """Each vendored file → its header; a file that says it is vendored without naming its origin fails here."""
    vendored, unnamed = {}, []
    for path in source_files():
        said = header(path)
        if path.name == Path(__file__).name:
            continue  # this file's own docstring quotes the phrases it looks for
        native_under_specviz = path.suffix in NATIVE and path.is_relative_to(ROOT / "specviz")
        if ORIGIN.search(said):
            vendored[path] = said
        elif SAYS_VENDORED.search(said) or (native_under_specviz and not SAYS_OURS.search(said)):
            unnamed.append(str(path.relative_to(ROOT)))
    assert not unnamed, (
        f"{unnamed} say they come from elsewhere (or are native code under specviz/) but name no origin: give each a "
        "header line 'From PROJECT (URL, version, path)' with its copyright and licence, or say it is specviz's own"
    )
    return vendored


def test_the_project_is_mit_licensed_as_the_readme_says():
    licence = (ROOT / "LICENSE").read_text() if (ROOT / "LICENSE").is_file() else ""
    assert licence.startswith("MIT License") and "Permission is hereby granted, free of charge" in licence, (
        "LICENSE must hold the MIT licence's full text: the README's front matter says `license: mit`"
    )
    assert "the specviz authors" in licence, "LICENSE names its copyright holder: the specviz authors"
    front_matter = (ROOT / "README.md").read_text().split("---")[1]
    assert re.search(r"^license: mit$", front_matter, re.MULTILINE), "the README's front matter and LICENSE disagree"


def test_the_vendored_kernel_is_found():
    """The test below is not vacuous: the torchao kernel (wherever it lives under specviz/) is found by its header."""
    origins = {ORIGIN.search(said).group(1) for said in vendored_files().values()}
    assert "torchao" in origins, f"the vendored torchao kernel was not found under specviz/ (found origins: {origins})"


def test_every_vendored_file_has_its_notice():
    sections = notice_sections()
    missing = []
    for path, said in vendored_files().items():
        project = ORIGIN.search(said).group(1)
        name = str(path.relative_to(ROOT))
        body = next((body for heading, body in sections.items() if project.lower() in heading), None)
        if body is None:
            missing.append(f"{name}: no section '## {project}' in THIRD_PARTY_NOTICES.md")
            continue
        for holder in COPYRIGHT.findall(said):
            if f"Copyright (c) {holder.strip()}" not in body:
                missing.append(f"{name}: the {project} section lacks its header's notice 'Copyright (c) {holder.strip()}'")
        for licence, words in LICENCE_TEXTS.items():
            if re.search(rf"\b{licence}\b", said) and words not in body:
                missing.append(f"{name}: the {project} section lacks the {licence} licence's full text")
    assert not missing, "vendored files without their notice:\n" + "\n".join(missing)


def test_every_bundled_model_started_from_another_model_has_its_notice():
    """A draft or head that started from its target's layers ships weights derived from the target: the target's
    licence (Apache-2.0 for SmolLM2 and Qwen2.5-Coder) asks for its notice."""
    catalogue = yaml.safe_load((ROOT / "models.yaml").read_text())
    targets_of: dict[str, set[str]] = {}
    for entry in catalogue["pairs"].values():
        for role in ("draft", "feature_head"):
            if str(entry.get(role, "")).startswith("assets/"):
                targets_of.setdefault(entry[role], set()).add(entry["target"])
    sections = notice_sections()
    derived, missing = [], []
    for card in sorted((ROOT / "assets").glob("*/MODEL_CARD.md")):
        folder = str(card.parent.relative_to(ROOT))
        if "started from the target" not in card.read_text():
            continue
        derived.append(folder)
        for target in sorted(targets_of.get(folder, ())):
            body = sections.get(target.lower())
            if body is None or folder not in body or LICENCE_TEXTS["Apache"] not in NOTICES.read_text():
                missing.append(f"{folder} (from {target})")
    assert derived, "no bundled model card says it started from its target: has the phrase changed? (this test reads it)"
    assert not missing, f"bundled models derived from another model, without a section naming them: {missing}"
