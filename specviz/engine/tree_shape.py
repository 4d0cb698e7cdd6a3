"""A token tree's shape, as users type it ("4x2x1", "4x2x1:2", "nodes=16,depth=5") and as the drafters grow it.
Light: no torch, so settings and the app's page can hold one.

`branching[d]` is how many children each branching node of depth d gets (the root is depth 0), `expanded` how many
nodes of a depth branch: those whose path the draft finds most probable (the product of q along it), as EAGLE-2
ranks them (None lets every node branch), and `budget` how many nodes of the grown tree to keep, the most probable
(EAGLE-2's dynamic tree; None keeps all). A chain is branching (1, …, 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TREE_NODES = 64  # the most drafted nodes one verify pass may hold (the app, CLI and models.yaml read it)
MAX_TREE_DEPTH = 16  # as deep as the longest chain (settings.MAX_GAMMA)
DYNAMIC_WIDTH = 4  # a dynamic shape's children per branching node and branching nodes per depth, unless given
SHAPE_FORMS = (
    "widths per depth like 4x2x1, 4x2x1:2 (only the 2 most probable nodes of a depth branch), or nodes=16,depth=5[,width=4]"
)


@dataclass(frozen=True)
class TreeShape:
    """Children per branching node at each depth, how many nodes of a depth branch (None: all), and how many nodes
    of the grown tree to keep, the most probable (None: all)."""

    branching: tuple[int, ...]
    expanded: int | None = None
    budget: int | None = None

    def __post_init__(self) -> None:
        if not self.branching or any(width < 1 for width in self.branching):
            raise ValueError(f"a tree shape needs at least one depth and ≥ 1 child per branching node, not {self.branching}")
        if self.expanded is not None and self.expanded < 1:
            raise ValueError(f"at least one node per depth must branch, not {self.expanded}")
        if self.budget is not None and self.budget < 1:
            raise ValueError(f"a tree's node budget must be at least 1, not {self.budget}")

    @classmethod
    def chain(cls, gamma: int) -> TreeShape:
        return cls((1,) * gamma)

    @classmethod
    def dynamic(cls, nodes: int, depth: int, width: int = DYNAMIC_WIDTH) -> TreeShape:
        """EAGLE-2's shape: per depth the `width` most probable nodes branch into their top `width`, then the `nodes`
        most probable nodes of the whole tree stay."""
        if depth < 1 or width < 1:
            raise ValueError(f"a dynamic tree needs depth ≥ 1 and width ≥ 1, not depth {depth}, width {width}")
        return cls((width,) * depth, expanded=width, budget=nodes)

    @classmethod
    def parse(cls, text: str) -> TreeShape:
        """The shape a user typed: "4x2x1" (children per depth), "4x2x1:2" (only the 2 most probable nodes of a depth
        branch), "nodes=16,depth=5" or "nodes=16,depth=5,width=3" (dynamic, EAGLE-2). Errors are one sentence."""
        compact = re.sub(r"\s+", "", str(text)).lower().replace("×", "x")
        if "=" in compact:
            return cls._parse_dynamic(text, compact)
        match = re.fullmatch(r"(\d+(?:x\d+)*)(?::(\d+))?", compact)
        if not match:
            raise ValueError(f"cannot read the tree shape {text!r}: write {SHAPE_FORMS}")
        widths = tuple(int(width) for width in match.group(1).split("x"))
        if 0 in widths:
            raise ValueError(f"the tree shape {text!r} has a depth with no children: every width must be at least 1")
        if match.group(2) is not None and int(match.group(2)) < 1:
            raise ValueError(f"the tree shape {text!r} lets no node branch: the number after ':' must be at least 1")
        return cls(widths, int(match.group(2)) if match.group(2) else None).within_limits(text)

    @classmethod
    def _parse_dynamic(cls, text: str, compact: str) -> TreeShape:
        values: dict[str, int] = {}
        for part in compact.split(","):
            key, _, value = part.partition("=")
            if key not in ("nodes", "depth", "width"):
                raise ValueError(f"unknown key {key!r} in the tree shape {text!r}: write nodes=16,depth=5[,width=4]")
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"{key} in the tree shape {text!r} must be a whole number of at least 1, not {value!r}")
            values[key] = int(value)
        if "nodes" not in values or "depth" not in values:
            raise ValueError(f"the dynamic tree shape {text!r} needs both nodes= and depth=, like nodes=16,depth=5")
        return cls.dynamic(values["nodes"], values["depth"], values.get("width", DYNAMIC_WIDTH)).within_limits(text)

    def within_limits(self, text: str) -> TreeShape:
        """This shape, if one verify pass can hold it (else a ValueError in one sentence)."""
        if self.depth > MAX_TREE_DEPTH or self.n_nodes > MAX_TREE_NODES:
            raise ValueError(
                f"a tree may be at most {MAX_TREE_DEPTH} deep with at most {MAX_TREE_NODES} nodes "
                f"({text!r} is {self.depth} deep with {self.n_nodes} nodes)"
            )
        return self

    @property
    def text(self) -> str:
        """The shape as `parse` reads it."""
        if self.is_dynamic:
            width = self.branching[0]
            return f"nodes={self.budget},depth={len(self.branching)}" + (f",width={width}" if width != DYNAMIC_WIDTH else "")
        widths = "x".join(str(width) for width in self.branching)
        return widths if self.expanded is None else f"{widths}:{self.expanded}"

    @property
    def is_dynamic(self) -> bool:
        """EAGLE-2's shape (what `dynamic` builds): uniform widths, as many branch as each gets children, a budget."""
        widths = set(self.branching)
        return self.budget is not None and len(widths) == 1 and self.expanded == self.branching[0]

    def cut(self, depth: int) -> TreeShape:
        """The same shape, no deeper than `depth`."""
        return TreeShape(self.branching[:depth], self.expanded, self.budget)

    @property
    def n_nodes(self) -> int:
        """The nodes a full tree of this shape holds (fewer if a draft runs out of tokens to offer)."""
        total, level = 0, 1
        for width in self.branching:
            level = level * width
            total += level
            level = min(level, self.expanded) if self.expanded is not None else level
        return total if self.budget is None else min(total, self.budget)

    @property
    def depth(self) -> int:
        return len(self.branching)

    @property
    def is_chain(self) -> bool:
        return all(width == 1 for width in self.branching)

    def __str__(self) -> str:
        if self.is_dynamic:
            width = self.branching[0]
            return f"{self.budget} nodes, depth {self.depth} (per depth the {width} best branch {width} ways)"
        widths = "×".join(str(width) for width in self.branching)
        shown = widths if self.expanded is None else f"{widths}, top {self.expanded} branch"
        return shown if self.budget is None else f"{shown}, best {self.budget} kept"
