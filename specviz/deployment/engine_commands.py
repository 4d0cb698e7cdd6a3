"""The three commands that run an exported EAGLE-3 head in llama.cpp, vLLM and SGLang: one function makes them.

`export` prints them and the deployment report shows them, so the two never drift apart. Light: no torch.

Each engine drafts what specviz measured fastest for the pair, as far as it can express it:
  - llama.cpp drafts a chain: `--spec-draft-n-max K` (greedy top-1 from the head, no early stop at
    `--spec-draft-p-min 0`, its default);
  - vLLM drafts a chain: `num_speculative_tokens` K;
  - SGLang drafts a tree: `--speculative-num-steps` (depth), `--speculative-eagle-topk` (children per node) and
    `--speculative-num-draft-tokens` (the nodes it keeps, plus the pending token). A chain of K is steps K, top-k 1,
    K + 1 draft tokens; specviz's tree keeps its depth, its widest branching as top-k and its node count.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # light: the report renders these lines where torch is not loaded
    from specviz.engine.tree_shape import TreeShape


@dataclass(frozen=True)
class EngineCommands:
    """Shell lines, in the order to run them: convert for llama.cpp and serve there, serve in vLLM, serve in SGLang."""

    llama_cpp: tuple[str, ...]
    vllm: tuple[str, ...]
    sglang: tuple[str, ...]
    gamma: int  # K: the chain llama.cpp and vLLM draft
    tree: str | None  # the tree SGLang drafts, where specviz measured one fastest

    def lines(self) -> list[str]:
        """The commands as a reader copies them, each engine under a comment naming it."""
        return [
            "# llama.cpp (from its source tree: convert the head against the target, then serve)",
            *self.llama_cpp,
            "# vLLM",
            *self.vllm,
            "# SGLang",
            *self.sglang,
        ]

    def to_json(self) -> dict:
        return asdict(self)


def sglang_tree(gamma: int, tree: TreeShape | None) -> tuple[int, int, int]:
    """(steps, top-k, draft tokens) for SGLang: a chain of γ, or the tree's depth, widest branching and nodes + 1."""
    if tree is None or tree.is_chain:
        depth = gamma if tree is None else tree.depth
        return depth, 1, depth + 1
    return tree.depth, max(tree.branching), tree.n_nodes + 1


def engine_commands(
    head_dir: str,
    target_dir: str,
    target_gguf: str | None,
    gamma: int,
    tree: TreeShape | None = None,
    threads: int | None = None,
) -> EngineCommands:
    """The commands for a head exported to `head_dir` beside `target_dir` (its `--target-model-dir`), drafting γ (and
    `tree` in SGLang). `target_gguf` is the target's GGUF for llama.cpp; None: a line converts the target first."""
    q = shlex.quote
    head_gguf = f"{head_dir.rstrip('/')}.gguf"
    # bf16: the exported head's own weights exactly, at half f32's bytes (llama.cpp drafts faster from it)
    convert = [
        f"python convert_hf_to_gguf.py {q(head_dir)} --target-model-dir {q(target_dir)} --outtype bf16 --outfile {q(head_gguf)}"
    ]
    if target_gguf is None:
        target_gguf = f"{target_dir.rstrip('/')}.gguf"
        convert.insert(0, f"python convert_hf_to_gguf.py {q(target_dir)} --outfile {q(target_gguf)}")
    thread_flag = f" -t {threads} -td {threads}" if threads else ""
    llama_cpp = (
        *convert,
        f"llama-server -m {q(target_gguf)} -md {q(head_gguf)} --spec-type draft-eagle3 --spec-draft-n-max {gamma}"
        f" --spec-draft-n-min 0{thread_flag}",
    )
    speculative = {"method": "eagle3", "model": head_dir, "num_speculative_tokens": gamma}
    vllm = (f"vllm serve {q(target_dir)} --speculative-config {q(json.dumps(speculative))}",)
    steps, top_k, draft_tokens = sglang_tree(gamma, tree)
    sglang = (
        f"python -m sglang.launch_server --model-path {q(target_dir)} --speculative-algorithm EAGLE3"
        f" --speculative-draft-model-path {q(head_dir)} --speculative-num-steps {steps}"
        f" --speculative-eagle-topk {top_k} --speculative-num-draft-tokens {draft_tokens}",
    )
    return EngineCommands(llama_cpp, vllm, sglang, gamma, None if tree is None or tree.is_chain else tree.text)
