"""Strings from a file, a request or a model, shown as text wherever they land: never as Markdown or HTML markup.

The page's Markdown components (#status, #narration, #details) render Markdown and HTML, so a token, a pair
name or a trace's field is escaped twice here: HTML's special characters become entities, and Markdown's
punctuation is backslash-escaped, so `<img src=x>`, `**bold**` or `[a](b)` show exactly as typed.
"""

from __future__ import annotations

import html
import re

_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|~$:])")


def markdown_text(value: object) -> str:
    """The value as literal text inside Markdown (HTML entities for < > &, backslashes before Markdown's punctuation)."""
    return html.escape(_MARKDOWN_PUNCTUATION.sub(r"\\\1", str(value)), quote=False)


def markdown_repr(value: str) -> str:
    """repr(value) (quotes shown, newlines as \\n), as literal text inside Markdown: how the narration names a token."""
    return markdown_text(repr(value))


def html_text(value: object) -> str:
    """The value as literal text inside HTML, attributes included."""
    return html.escape(str(value), quote=True)
