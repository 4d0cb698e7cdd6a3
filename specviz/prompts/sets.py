"""Built-in prompts by domain: the domain effect on α is one click (or one flag) away. The prompts themselves are
data, in builtin.json beside this module."""

from __future__ import annotations

import json
from pathlib import Path

from specviz.prompts.stdlib import read_sources, split_stdlib

_BUILT_IN = json.loads(Path(__file__).with_name("builtin.json").read_text(encoding="utf-8"))
# chat prompts the smollm2 draft never saw: topics and phrasings absent from its training prompts
CHAT_HELDOUT: list[str] = _BUILT_IN["chat_heldout"]
# coding questions for a chat-tuned coder target (the Qwen2.5-Coder pair): written here, held out of any training
CODE_QUESTIONS: list[str] = _BUILT_IN["code_questions"]
# input-grounded chat prompts: the answer repeats much of the prompt, which is where prompt lookup shines
CHAT_REWRITE: list[str] = _BUILT_IN["chat_rewrite"]

_domains = _BUILT_IN["domains"]
PROMPTS: dict[str, list[str]] = {
    # each code prompt ends mid-line: a prompt ending in a newline splits the tokenizer's newline+indent tokens.
    # Chosen with benchmarks/preset_candidates.py on the bundled pair (greedy, 96 new tokens): the target does not
    # loop on any (distinct-4 0.74-0.94) and the distilled draft's α (0.72-0.89 at γ = 4) is far above the plain
    # draft's (0.21-0.38). The first is the app's default and lesson 1 (α 0.83, distinct-4 0.85).
    "code": _domains["code"],
    "prose": _domains["prose"],
    "chat": CHAT_HELDOUT[:6],  # shown as the user's message; pairs with `chat_template: true` wrap them
    "repetitive": _domains["repetitive"],
    "arithmetic": _domains["arithmetic"],
}
DOMAINS = tuple(PROMPTS)


def heldout_code_prompts(count: int = 8, n_lines: int = 12) -> list[str]:
    """Code the bundled pair never saw: windows of the standard-library files held out from its training."""
    prompts = []
    files = [path for path in split_stdlib().validation if path.parent.name != "encodings"]  # codec tables are not typical code
    for text in read_sources(files):
        lines = text.splitlines(keepends=True)
        if len(lines) < 60:
            continue
        start = len(lines) // 3  # past the licence header and imports, into real code
        # end after the last line's text, not its newline: the tokenizer merges a newline with the next
        # line's indentation, so a prompt ending in a bare newline forces a split the models rarely saw
        prompts.append("".join(lines[start : start + n_lines]).rstrip("\n"))
        if len(prompts) == count:
            break
    return prompts


def load_prompt_set(name: str) -> list[str]:
    """A domain name, 'all', 'heldout' (code; 'heldout:16' for 16 of them), 'chat-heldout' ('chat-heldout:16': its first 16),
    'code-questions' ('code-questions:16': coding questions for a chat coder model), or a text file of prompts separated by '---' lines."""
    if name in PROMPTS:
        return PROMPTS[name]
    if name == "all":
        return [prompt for prompts in PROMPTS.values() for prompt in prompts]
    if name == "heldout":
        return heldout_code_prompts()
    if name.startswith("heldout:") and name.removeprefix("heldout:").isdigit():  # heldout:16, more windows of held-out code
        return heldout_code_prompts(int(name.removeprefix("heldout:")))
    if name == "code-questions":
        return list(CODE_QUESTIONS)
    if name.startswith("code-questions:") and name.removeprefix("code-questions:").isdigit():  # the first N questions
        return list(CODE_QUESTIONS[: int(name.removeprefix("code-questions:"))])
    if name == "chat-heldout":
        return list(CHAT_HELDOUT)
    if name.startswith("chat-heldout:") and name.removeprefix("chat-heldout:").isdigit():  # the first N questions
        return list(CHAT_HELDOUT[: int(name.removeprefix("chat-heldout:"))])
    path = Path(name)
    if not path.is_file():
        raise ValueError(
            f"unknown prompt set {name!r}: use one of {', '.join(DOMAINS)}, all, heldout, chat-heldout, code-questions, or a file"
        )
    return [chunk.strip("\n") for chunk in path.read_text().split("\n---\n") if chunk.strip()]
