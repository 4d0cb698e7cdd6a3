"""A token as the page draws it: its text laid out as code inside a span that carries its state and its hover."""

from __future__ import annotations

import html

SPECIAL_LABELS = {"<|im_end|>": "end of turn", "<|endoftext|>": "end of text", "<|eot_id|>": "end of turn"}
PARTIAL = '<span class="sv-txt sv-partial" title="the first bytes of a character: the next token completes it">⋯</span>'


def token_parts(text: str, show_newlines: bool = True) -> str:
    """Code as code: a newline ends the line (a small ↵ marks it), indentation stays spaces drawn thin, the rest is the coloured box.

    A token that only starts a character (its piece is empty) shows ⋯; a special token such as <|im_end|>
    shows a small label, not chat-template markup.
    """
    if not text:
        return PARTIAL
    if text.startswith("<|") and text.endswith("|>") and "\n" not in text:
        label = SPECIAL_LABELS.get(text, text.strip("<|>"))
        return f'<span class="sv-txt sv-special" title="{html.escape(text, quote=True)}">{html.escape(label)}</span>'
    parts = []
    for i, line in enumerate(text.split("\n")):
        if i:
            parts.append('<span class="sv-nl">↵</span>\n' if show_newlines else "\n")
        body = line.lstrip(" \t")
        indent = line[: len(line) - len(body)]
        if indent:
            parts.append(f'<span class="sv-ws">{html.escape(indent)}</span>')
        if body:
            parts.append(f'<span class="sv-txt">{html.escape(body)}</span>')
    return "".join(parts)


def token_span(text: str, status: str, tip: str = "", cycle: int | None = None, extra_class: str = "") -> str:
    """A token in its state (palette.LEGEND), with its hover text (data-tip) and its cycle."""
    attributes = f' data-status="{status}"'
    if cycle is not None:
        attributes += f' data-cycle="{cycle}"'
    if tip:
        attributes += f' data-tip="{html.escape(tip, quote=True)}" aria-label="{html.escape(tip, quote=True)}"'
    return f'<span class="sv-tok {extra_class}"{attributes}>{token_parts(text, status != "prompt")}</span>'
