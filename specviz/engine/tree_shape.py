"""A token tree's shape, as users type it ("4x2x1") and as the drafters grow it. Light: no torch, so settings and
the app's page can hold one.

`branching[d]` is how many children each branching node of depth d gets (the root is depth 0), and `expanded` how
many nodes of a depth branch: those whose path the draft finds most probable (the product of q along it), as EAGLE-2
ranks them; None lets every node branch. A chain is branching (1, …, 1).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_TREE_NODES = 64  # the most drafted nodes one verify pass may hold (the app, CLI and models.yaml read it)
MAX_TREE_DEPTH = 16  # as deep as the longest chain (settings.MAX_GAMMA)


@dataclass(frozen=True)
class TreeShape:
    """Children per branching node at each depth, and how many nodes of a depth branch (None: all)."""

    branching: tuple[int, ...]
    expanded: int | None = None

    def __post_init__(self) -> None:
        if not self.branching or any(width < 1 for width in self.branching):
            raise ValueError(f"a tree shape needs at least one depth and ≥ 1 child per branching node, not {self.branching}")
        if self.expanded is not None and self.expanded < 1:
            raise ValueError(f"at least one node per depth must branch, not {self.expanded}")

    @classmethod
    def chain(cls, gamma: int) -> TreeShape:
        return cls((1,) * gamma)

    def cut(self, depth: int) -> TreeShape:
        """The same shape, no deeper than `depth`."""
        return TreeShape(self.branching[:depth], self.expanded)

    @property
    def n_nodes(self) -> int:
        """The nodes a full tree of this shape holds (fewer if a draft runs out of tokens to offer)."""
        total, level = 0, 1
        for width in self.branching:
            level = level * width
            total += level
            level = min(level, self.expanded) if self.expanded is not None else level
        return total

    @property
    def depth(self) -> int:
        return len(self.branching)

    @property
    def is_chain(self) -> bool:
        return all(width == 1 for width in self.branching)

    @property
    def text(self) -> str:
        """What `parse` reads back: "4x2x1", or "4x2x1:2" when only the 2 most probable nodes of a depth branch."""
        widths = "x".join(str(width) for width in self.branching)
        return widths if self.expanded is None else f"{widths}:{self.expanded}"

    @classmethod
    def parse(cls, text: str) -> TreeShape:
        """A shape as users type it: children per branching node at each depth, "4x2x1" (× works too), optionally
        ":N" for only the N most probable nodes of a depth to branch ("6x3x2x1:3"). A ValueError says why not."""
        cleaned = text.strip().replace("×", "x").replace("*", "x").replace(" ", "")
        widths_text, _, expanded_text = cleaned.partition(":")
        try:
            widths = tuple(int(width) for width in widths_text.split("x"))
            expanded = int(expanded_text) if expanded_text else None
        except ValueError:
            raise ValueError(
                f"a tree shape is children per depth such as 4x2x1, optionally :N for only the N most probable nodes "
                f"of a depth to branch (got {text!r})"
            ) from None
        shape = cls(widths, expanded)
        if shape.depth > MAX_TREE_DEPTH or shape.n_nodes > MAX_TREE_NODES:
            raise ValueError(
                f"a tree may be at most {MAX_TREE_DEPTH} deep with at most {MAX_TREE_NODES} nodes "
                f"({shape.text} is {shape.depth} deep with {shape.n_nodes} nodes)"
            )
        return shape

    def __str__(self) -> str:
        widths = "×".join(str(width) for width in self.branching)
        return widths if self.expanded is None else f"{widths}, top {self.expanded} branch"
