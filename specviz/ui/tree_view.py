"""A token tree's cycle on the page: the drawing, each node's hover, and Step's sentences depth by depth. Pure functions.

The drawing puts the root (the last committed token) at the left and each depth one column to the right; every
node is a token in the stream's states (palette.LEGEND: accepted, rejected, never tested, drafted while the target
has not answered yet), the accepted path is bold, and the target's own token hangs after the path as one more child
of its last node. A chain's cycle is not drawn: the stream shows it whole, as before.
"""

from __future__ import annotations

import html

from specviz.engine.events import Cycle, RunStarted
from specviz.engine.tree_shape import TreeShape
from specviz.numbers import number
from specviz.run.trace import Trace
from specviz.ui.as_text import markdown_repr, markdown_text
from specviz.ui.tokens import token_span

ROOT = -1  # the parent of depth 1: the last committed token
COLUMN_PX, ROW_PX = 124, 34  # one depth, one leaf
WIDE_PX = 740  # a drawing wider than the page's column scrolls sideways inside its box
NODE_HEIGHT_PX, EDGE_START_PX = 24, 16  # a node's box (96 px wide at most, palette.CSS); where its edges leave it


def depth_of(parents: tuple[int, ...], node: int) -> int:
    """1 for the root's children, one more per generation (0 for the root)."""
    depth = 0
    while node != ROOT:
        node, depth = parents[node], depth + 1
    return depth


def children_of(parents: tuple[int, ...], node: int) -> list[int]:
    """The nodes whose parent is `node`, in drafting order: the order the target tests them."""
    return [child for child, parent in enumerate(parents) if parent == node]


def branch_of(parents: tuple[int, ...], node: int) -> int:
    """A node's place among its siblings, from 1: "branch 2" was tested second."""
    return children_of(parents, parents[node]).index(node) + 1


def rows_of(parents: tuple[int, ...]) -> tuple[dict[int, float], int]:
    """Each node's row (the root's too, as ROOT): leaves one row each in depth-first order, a parent midway between
    its first and last child; and the number of rows."""
    rows: dict[int, float] = {}
    leaves = 0

    def place(node: int) -> float:
        nonlocal leaves
        below = [place(child) for child in children_of(parents, node)]
        if below:
            rows[node] = (below[0] + below[-1]) / 2
        else:
            rows[node], leaves = float(leaves), leaves + 1
        return rows[node]

    place(ROOT)
    return rows, leaves


def shape_text(started: RunStarted) -> str:
    """A tree run's shape for people: "3×2×1, top 2 branch"."""
    try:
        return str(TreeShape.parse(started.tree))
    except ValueError:  # a shared trace's text: shown as text (the caller escapes it), never trusted
        return started.tree


def shape_words(started: RunStarted | None) -> str:
    """How the run drafted, in words: "a chain of γ = 4" or "a token tree 3×2×1, top 2 branch"."""
    if started is None:
        return "—"
    return f"a token tree {shape_text(started)}" if started.tree else f"a chain of γ = {started.gamma}"


def _tested_siblings(cycle: Cycle, node: int) -> list[int]:
    """The siblings the target tested before `node`, in order."""
    before = children_of(cycle.parents, cycle.parents[node])
    return [s for s in before[: before.index(node)] if cycle.positions[s].status != "unverified"]


def node_tip(cycle: Cycle, node: int, greedy: bool) -> str:
    """A node's hover: where it sits, q, and the target's test (p, min(1, p/q), u) where it was tested."""
    position = cycle.positions[node]
    depth, branch = depth_of(cycle.parents, node), branch_of(cycle.parents, node)
    lines = [
        f"depth {depth}, branch {branch} of cycle {cycle.index + 1}: {position.text!r}",
        f"q(x) = {number(position.q)}   (draft)",
    ]
    if position.status == "unverified":
        parent = cycle.parents[node]
        if parent == ROOT or cycle.positions[parent].status == "accepted":
            lines.append("never tested: an earlier branch here was accepted first")
        else:
            lines.append("never tested: its parent was not accepted")
        return "\n".join(lines)
    lines.append(f"p(x) = {number(position.p)}   (target)")
    if greedy:
        verdict = "accepted: the target's top token" if position.status == "accepted" else "rejected: not the target's top token"
        lines.append(f"greedy test → {verdict}")
        return "\n".join(lines)
    elder = _tested_siblings(cycle, node)
    if elder:
        lines.append(f"tested after {len(elder)} rejected branch{'es' if len(elder) > 1 else ''}: against the residual p")
        lines.append(f"and q without {'them' if len(elder) > 1 else 'it'}: p/q there = {number(position.accept_probability)}")
    else:
        lines.append(f"min(1, p/q) = {number(position.accept_probability)}")
    comparison = "≤" if position.status == "accepted" else ">"
    lines.append(f"u = {number(position.u)} {comparison} {number(position.accept_probability)} → {position.status}")
    return "\n".join(lines)


def _end_of_path(cycle: Cycle) -> tuple[int, int]:
    """The last accepted node (ROOT if none) and the depth the target's own token lands at."""
    last = cycle.accepted_nodes[-1] if cycle.accepted_nodes else ROOT
    return last, len(cycle.accepted_nodes) + 1


def target_token_tip(cycle: Cycle, greedy: bool) -> str:
    """The hover of the target's own token in a tree's cycle: a bonus at a leaf, else what replaced the rejected branches."""
    last, depth = _end_of_path(cycle)
    text = cycle.new_token_text
    own = cycle.bonus_token_id if cycle.bonus_token_id is not None else cycle.resampled_token_id
    p = next((prob for token, _, prob in cycle.bonus_top_p if token == own), None)
    if cycle.bonus_token_id is not None:
        return (
            f"bonus token {text!r}\nthe path reached a leaf ({cycle.n_accepted} accepted), so the target adds\n"
            f"one more from its p after it: p(x) = {number(p)}"
        )
    tested = len(children_of(cycle.parents, last))
    branches = f"{tested} branch{'es' if tested > 1 else ''}"
    if greedy:
        return f"the target's own {text!r}: its top token at depth {depth},\nwhere none of the {branches} drafted there was"
    return f"resampled {text!r} at depth {depth} from the residual\nnorm(max(0, p − q)) left after rejecting its {branches}"


def tree_html(trace: Trace, cycle_index: int, decided: bool) -> str:
    """The drawing of one tree cycle ("" for a chain's): its nodes drafted, or, once `decided`, in their states."""
    if trace.started is None or not 0 <= cycle_index < len(trace.cycles) or not trace.cycles[cycle_index].is_tree:
        return ""
    cycle = trace.cycles[cycle_index]
    last, _ = _end_of_path(cycle)
    parents = cycle.parents + ((last,) if decided else ())  # the target's own token: one more child of the path's end
    rows, n_rows = rows_of(parents)
    depths = {node: depth_of(parents, node) for node in range(len(parents))} | {ROOT: 0}
    places = {node: (depths[node] * COLUMN_PX, rows[node] * ROW_PX) for node in depths}
    width, height = (max(depths.values()) + 1) * COLUMN_PX, n_rows * ROW_PX
    caption = (
        f"Cycle {cycle.index + 1} · {html.escape(shape_words(trace.started))}: {len(cycle.positions)} nodes and the pending token, "
        f"verified in one pass of {cycle.n_rows} rows"
        + (f"; the path the target kept is bold: {len(cycle.emitted_token_ids)} tokens." if decided else ".")
    )
    wide = " sv-tree-wide" if width > WIDE_PX else ""
    return (
        f'<div class="sv-tree{wide}" data-cycle="{cycle.index}" data-decided="{int(decided)}">'
        f'<div class="sv-tree-caption">{caption}</div><div class="sv-tree-area" style="width:{width}px;height:{height}px">'
        f'<svg class="sv-tree-edges" width="{width}" height="{height}" viewBox="0 0 {width} {height}" aria-hidden="true">'
        f"{_edges(cycle, parents, places, decided)}</svg>{_nodes(trace, cycle, parents, places, decided)}</div></div>"
    )


def _edge_kind(cycle: Cycle, node: int, decided: bool) -> str:
    """How an edge into `node` is drawn (palette.CSS, .sv-edge[data-kind])."""
    if node == len(cycle.positions):
        return "bonus" if cycle.bonus_token_id is not None else "resampled"
    if not decided:
        return "drafted"
    return "path" if node in cycle.accepted_nodes else cycle.positions[node].status


def _edges(cycle: Cycle, parents: tuple[int, ...], places: dict[int, tuple[float, float]], decided: bool) -> str:
    """One curve from each node's parent (leaving from behind the parent's box) to the node."""
    edges = []
    for node, parent in enumerate(parents):
        (x0, y0), (x1, y1) = places[parent], places[node]
        x0, y0, y1 = x0 + EDGE_START_PX, y0 + NODE_HEIGHT_PX / 2, y1 + NODE_HEIGHT_PX / 2
        middle = (x0 + x1) / 2
        curve = f"M{x0:.0f},{y0:.0f} C{middle:.0f},{y0:.0f} {middle:.0f},{y1:.0f} {x1:.0f},{y1:.0f}"
        edges.append(f'<path class="sv-edge" data-kind="{_edge_kind(cycle, node, decided)}" d="{curve}"/>')
    return "".join(edges)


def _nodes(trace: Trace, cycle: Cycle, parents: tuple[int, ...], places: dict[int, tuple[float, float]], decided: bool) -> str:
    """The root, every drafted node, and once decided the target's own token, each a token in its state with its hover."""
    greedy = trace.started.temperature == 0
    root = token_span(
        node_label(last_committed_text(trace, cycle.index)), "prompt", "the last committed token: every branch grows from here"
    )
    nodes = [_placed(places[ROOT], root, ROOT)]
    for node, position in enumerate(cycle.positions):
        depth = depth_of(parents, node)
        if decided:
            span = token_span(node_label(position.text), position.status, node_tip(cycle, node, greedy), cycle.index)
        else:
            tip = f"drafted {position.text!r} at depth {depth}: q(x) = {number(position.q)}\nwaiting for the target"
            span = token_span(node_label(position.text), "drafted", tip, cycle.index)
        on_path = decided and node in cycle.accepted_nodes
        nodes.append(_placed(places[node], span, node, depth, branch_of(parents, node), on_path))
    if decided:
        kind = "bonus" if cycle.bonus_token_id is not None else "resampled"
        span = token_span(node_label(cycle.new_token_text), kind, target_token_tip(cycle, greedy), cycle.index)
        nodes.append(_placed(places[len(cycle.positions)], span, "target", _end_of_path(cycle)[1], 0, True))
    return "".join(nodes)


def current_tree_html(trace: Trace, shown: int, decided: bool) -> str:
    """The drawing under the stream at `shown` cycles: the last one's tree, or, where it drafted none (a plain target
    step at the token limit, a chain), the latest tree before it, decided; "" in a chain's run."""
    for index in range(min(shown, len(trace.cycles)) - 1, -1, -1):
        if trace.cycles[index].is_tree:
            return tree_html(trace, index, decided or index < shown - 1)
    return ""


def node_label(text: str) -> str:
    """A token as a node shows it: newlines and tabs as ↵ and →, a token of spaces alone as dots, so no box is empty."""
    label = text.replace("\n", "↵").replace("\t", "→")
    return label.replace(" ", "·") if label and not label.strip() else label


def _placed(xy: tuple[float, float], span: str, node: int | str, depth: int = 0, branch: int = 0, on_path: bool = False) -> str:
    """A node's box at its place in the drawing, with what scripts read: its node, depth, branch and whether it is on the path."""
    x, y = xy
    path = ' data-path="1"' if on_path else ""
    return (
        f'<div class="sv-node{" sv-on-path" if on_path else ""}" data-node="{node}" data-depth="{depth}" data-branch="{branch}"'
        f'{path} style="left:{x:.0f}px;top:{y:.0f}px">{span}</div>'
    )


def last_committed_text(trace: Trace, cycle_index: int) -> str:
    """The token a cycle's tree grows from: the previous cycle's last emitted token, or the prompt's last."""
    if cycle_index > 0:
        return trace.cycles[cycle_index - 1].new_token_text
    texts = trace.started.prompt_texts if trace.started else ()
    return texts[-1] if texts else ""


def nodes_per_depth(cycle: Cycle) -> list[int]:
    """How many nodes the draft grew at each depth."""
    depths = [depth_of(cycle.parents, node) for node in range(len(cycle.parents))]
    return [depths.count(d) for d in range(1, max(depths, default=0) + 1)]


def drafted_sentence(cycle: Cycle, started: RunStarted | None) -> str:
    """Step's draft phase of a tree cycle (Markdown)."""
    per_depth = nodes_per_depth(cycle)
    counts = ", ".join(f"{n} at depth {d}" for d, n in enumerate(per_depth, start=1))
    forwards = cycle.n_draft_forwards
    return (
        f"the draft grew {markdown_text(shape_words(started))}: {len(cycle.positions)} nodes ({counts}), the most probable "
        f"branches expanded depth by depth, {forwards} draft forward{'s' if forwards != 1 else ''} in {cycle.draft_s * 1000:.2f} ms."
    )


def verified_sentence(cycle: Cycle) -> str:
    """Step's verify phase of a tree cycle (Markdown)."""
    return (
        f"the target scored all {len(cycle.positions)} nodes and the pending token in **one** forward pass of {cycle.n_rows} rows "
        f"({cycle.verify_s * 1000:.2f} ms): a tree mask lets each node see only its own ancestors, so every branch is scored "
        "as if it were the only one."
    )


def walk_sentences(cycle: Cycle, greedy: bool) -> list[str]:
    """Step's decision of a tree cycle, depth by depth: which branches were tested and why each was kept or not (Markdown)."""
    sentences, node = [], ROOT
    for depth in range(1, len(cycle.accepted_nodes) + 2):
        tested = [c for c in children_of(cycle.parents, node) if cycle.positions[c].status != "unverified"]
        if not tested:
            break
        said = [_test_words(cycle, child, greedy) for child in tested]
        kept = next((child for child in tested if cycle.positions[child].status == "accepted"), None)
        if kept is None:
            said.append(_replaced_words(cycle, greedy))
        sentences.append(f"depth {depth}: " + ", ".join(said))
        if kept is None:
            return sentences
        node = kept
    new = markdown_repr(cycle.new_token_text)
    sentences.append(f"the path reached a leaf at depth {len(cycle.accepted_nodes)}, so the target adds a bonus token {new}")
    return sentences


def _test_words(cycle: Cycle, child: int, greedy: bool) -> str:
    position = cycle.positions[child]
    branch = f"branch {branch_of(cycle.parents, child)} {markdown_repr(position.text)} {position.status}"
    if greedy:
        return branch + (": the target's top token" if position.status == "accepted" else "")
    comparison = "≤" if position.status == "accepted" else ">"
    residual = " against the residual" if _tested_siblings(cycle, child) else ""
    return f"{branch}, u = {number(position.u, 2)} {comparison} p/q = {number(position.accept_probability, 2)}{residual}"


def _replaced_words(cycle: Cycle, greedy: bool) -> str:
    new = markdown_repr(cycle.new_token_text)
    if greedy:
        return f"none is the target's top token {new}, which the target adds itself"
    return f"so the target draws {new} from the residual norm(max(0, p − q))"


def decided_sentence(cycle: Cycle, greedy: bool) -> str:
    """Step's decide phase of a tree cycle (Markdown): the walk, the nodes never tested, the tokens this pass gave."""
    sentences = walk_sentences(cycle, greedy)
    untested = sum(position.status == "unverified" for position in cycle.positions)
    if untested:
        sentences.append(
            f"{untested} node{'s' if untested > 1 else ''} off the path {'were' if untested > 1 else 'was'} never tested"
        )
    emitted = len(cycle.emitted_token_ids)
    return "; ".join(sentences) + f". **{emitted} token{'s' if emitted > 1 else ''} for one target forward.**"


def stream_tokens(cycle: Cycle, greedy: bool, decided: bool, current: str) -> list[str]:
    """A tree cycle in the token stream: its emitted text only (the path, then the target's token); while drafting, a mark."""
    if not decided:
        tip = html.escape(f"drafted a tree of {len(cycle.positions)} nodes: drawn under the stream", quote=True)
        return [f'<span class="sv-tree-mark" data-tip="{tip}" aria-label="{tip}">🌳{len(cycle.positions)}</span>']
    parts = [
        token_span(cycle.positions[node].text, "accepted", node_tip(cycle, node, greedy), cycle.index, current)
        for node in cycle.path
    ]
    kind = "bonus" if cycle.bonus_token_id is not None else "resampled"
    parts.append(token_span(cycle.new_token_text, kind, target_token_tip(cycle, greedy), cycle.index, current))
    return parts[: len(cycle.emitted_token_ids)]  # the token limit or the end of text may cut the burst
