"""Coding requests for a coder target, written from the standard library's training files (no download).

Each request is built around one function of the training split (specviz.prompts.stdlib): explain it, review it,
test it, type it, or rewrite it from its docstring. A coder target's answers to them are the text its head learns to
draft (collect.py): code and prose about code, in the target's own words. The held-out files and the held-out coding
questions (specviz.prompts.sets.CODE_QUESTIONS) are never used: no request shares four words in a row with one.
"""

from __future__ import annotations

import ast
import hashlib
import random
from pathlib import Path

from specviz.prompts.sets import CODE_QUESTIONS
from specviz.prompts.stdlib import split_stdlib, stdlib_root

MAX_SOURCE_LINES = 24  # a function short enough that the request and the answer fit the collection's window

TEMPLATES_WITH_SOURCE = (
    "Explain what this Python function does, step by step:\n```python\n{source}\n```",
    "Review this Python code and suggest one improvement:\n```python\n{source}\n```",
    "Write pytest unit tests for this function:\n```python\n{source}\n```",
    "Add type hints and a short docstring to this function:\n```python\n{source}\n```",
    "Rewrite this function to be easier to read, keeping its behaviour:\n```python\n{source}\n```",
)
TEMPLATES_FROM_DOCSTRING = (
    "Write a Python function `{name}` that does this: {summary}",
    "Show a short example of how to use `{module}.{name}` from Python's standard library ({summary}).",
    "Implement a simplified `{name}` in Python. Its documentation says: {summary}",
)


def _functions(path: Path, root: Path):
    """(module name, function name, first docstring line, source) of each short, documented top-level function."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return
    module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        docstring = ast.get_docstring(node)
        source = ast.get_source_segment(text, node)
        if not docstring or not source or len(source.splitlines()) > MAX_SOURCE_LINES:
            continue
        summary = docstring.strip().splitlines()[0].strip()
        if len(summary.split()) >= 3:
            yield module, node.name, summary, source


def _shares_four_words(request: str, questions: list[str]) -> bool:
    def grams(text: str) -> set[tuple[str, ...]]:
        words = text.lower().split()
        return {tuple(words[i : i + 4]) for i in range(len(words) - 3)}

    own = grams(request)
    return any(own & grams(question) for question in questions)


def code_prompts(count: int | None = None, seed: int = 0) -> list[str]:
    """Up to `count` coding requests (all of them when None), in a stable shuffled order."""
    split, root = split_stdlib(), stdlib_root()
    requests = []
    for path in split.train:
        for module, name, summary, source in _functions(path, root):
            digest = int(hashlib.sha1(f"{module}.{name}".encode()).hexdigest(), 16)
            if digest % 2:
                template = TEMPLATES_WITH_SOURCE[digest // 2 % len(TEMPLATES_WITH_SOURCE)]
            else:
                template = TEMPLATES_FROM_DOCSTRING[digest // 2 % len(TEMPLATES_FROM_DOCSTRING)]
            request = template.format(module=module, name=name, summary=summary, source=source)
            if not _shares_four_words(request, CODE_QUESTIONS):
                requests.append(request)
    random.Random(seed).shuffle(requests)
    return requests[:count] if count is not None else requests
