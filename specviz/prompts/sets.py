"""Built-in prompts by domain: the domain effect on α is one click (or one flag) away."""

from __future__ import annotations

from pathlib import Path

from specviz.prompts.stdlib import read_sources, split_stdlib

CHAT_HELDOUT = [  # chat prompts the smollm2 draft never saw: topics and phrasings absent from its training prompts
    "Explain why the sky is blue in two sentences.",
    "What causes the seasons on Earth?",
    "Can you suggest a name for my new cat?",
    "How do I make a cup of hot chocolate?",
    "Write a limerick about a lazy turtle.",
    "What is the difference between weather and climate?",
    "Give me a packing list for a weekend at the beach.",
    "Why do leaves change colour in autumn?",
    "How can I stay focused while studying?",
    "What is a prime number? Give an example.",
    "Write a thank-you note to a neighbour who watered my plants.",
    "How do airplanes stay in the air?",
    "What does a healthy morning routine look like?",
    "Explain what a noun and a verb are.",
    "Why do cats purr?",
    "Describe a sunset over the mountains.",
    "What is the role of a goalkeeper in football?",
    "How does a refrigerator keep food cold?",
    "Suggest three fun activities for a rainy day.",
    "What is inflation, in plain words?",
    "How do I apologise to a friend after an argument?",
    "Write two sentences about the ocean at night.",
    "What does a firefighter do?",
    "Why is it important to wash your hands?",
]

CODE_QUESTIONS = [  # coding questions for a chat-tuned coder target (the Qwen2.5-Coder pair): written here, held out of any training
    "Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Implement binary search in Python and explain its time complexity in one sentence.",
    "Write a Python class for a stack with push, pop, peek and is_empty methods.",
    "Write a Python function that counts how often each word appears in a text file.",
    "Write a Python function that returns the n-th Fibonacci number using memoisation.",
    "Write a SQL query that lists the five customers with the highest total order amount.",
    "Write a JavaScript function that removes duplicate values from an array.",
    "Write a Python function that flattens a nested list of arbitrary depth.",
    "Write a bash script that prints the ten largest files in a directory.",
    "Write a Python function that validates an email address with a regular expression.",
    "Write a Python function that converts a Roman numeral to an integer.",
    "Write a Python function that finds the longest common prefix of a list of strings.",
    "Write a Python dataclass for a 2D point with a method that returns the distance to another point.",
    "Write a Python function that reads a CSV file and returns the average of one numeric column.",
    "Write a Python function that rotates a square matrix by 90 degrees clockwise.",
]

# Input-grounded chat prompts: the answer repeats much of the prompt, which is where prompt lookup shines.
CHAT_REWRITE = [
    "Rewrite this paragraph with the spelling mistakes fixed:\n\n"
    "Our class went on a trip to the museum last friday. We saw the bones of a huge dinosour and a room full of "
    "old coins. The guide told us that the museum was bilt more than a hundred years ago. After lunch we visited "
    "the space exibition and watched a short film about the moon.",
]

PROMPTS: dict[str, list[str]] = {
    "code": [  # each ends mid-line: a prompt ending in a newline splits the tokenizer's newline+indent tokens
        # Chosen with benchmarks/preset_candidates.py on the bundled pair (greedy, 96 new tokens): the target
        # does not loop on any (distinct-4 0.74-0.94) and the distilled draft's α (0.72-0.89 at γ = 4) is far
        # above the plain draft's (0.21-0.38). The first is the app's default and lesson 1 (α 0.83, distinct-4 0.85).
        "def get(self, key, default=None):\n    try:\n        return self",
        "def read_config(path):\n    with open(path) as f:\n        return",
        "import logging\n\nlogger = logging.getLogger(__name__)\n\n\ndef process(items):\n    for item in items:\n        logger",
        "def merge(a, b):\n    result = dict(a)\n    for key, value in b.items():\n        if key",
        "def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, int(n ** 0.5) + 1):\n        if",
        "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self",
        "import os\n\n\ndef list_python_files(root):\n    result = []\n    for dirpath, dirnames, filenames in os",
        'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n',
    ],
    "prose": [
        "The history of the printing press begins",
        "Once upon a time, in a small village by the sea,",
        "Photosynthesis is the process by which plants",
        "The most important lesson I learned as a teacher was",
    ],
    "chat": CHAT_HELDOUT[:6],  # shown as the user's message; pairs with `chat_template: true` wrap them
    "repetitive": [
        "Copy this list exactly: apple, banana, cherry, apple, banana, cherry, apple, banana, cherry,",
        "x = 1\ny = 2\nx = 1\ny = 2\nx = 1\ny = 2\n",
        "red green blue red green blue red green blue red green",
        "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i)\nfor i in range(10):\n",
    ],
    "arithmetic": [
        "12 + 35 = 47\n48 + 21 = 69\n73 + 14 =",
        "Question: what is 17 times 23? Answer:",
        "1, 2, 4, 8, 16, 32,",
        "total = 0\nfor n in range(1, 11):\n    total += n * n\nprint(total)  # prints",
    ],
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
