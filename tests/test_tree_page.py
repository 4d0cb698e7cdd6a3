"""A token tree on the page: each cycle's drawing, Step's walk down it, the stream, the race, the request's tree field
and the "Chain or tree?" lesson, all pure functions of recorded traces (a tiny sampled tree, the bundled pair greedy)."""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from html.parser import HTMLParser

import pytest

from specviz.analysis.readings import readings_of_trace
from specviz.checked import InputError
from specviz.engine.settings import SettingsError
from specviz.engine.tree_shape import TreeShape
from specviz.run.trace import Trace
from specviz.serving import recorder
from specviz.ui.lessons import Measured, lessons
from specviz.ui.render import narration, race_html, stream_html
from specviz.ui.request import RunRequest
from specviz.ui.tree_view import branch_of, children_of, rows_of, tree_html
from specviz.ui.views import inspector_choices
from tests.tiny import record_tiny_trace

CODE = "def fibonacci(n):\n"


class Nodes(HTMLParser):
    """Every node box of a drawing: its data-* attributes and the token span's (status, tip) inside it; and the edges."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.nodes: list[dict] = []
        self.edges: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        if tag == "div" and "sv-node" in attributes.get("class", ""):
            self.nodes.append({key: value for key, value in attributes.items() if key.startswith("data-")})
        elif tag == "span" and "sv-tok" in attributes.get("class", "") and self.nodes and "status" not in self.nodes[-1]:
            self.nodes[-1] |= {"status": attributes["data-status"], "tip": attributes.get("data-tip", "")}
        elif tag == "path" and "sv-edge" in attributes.get("class", ""):
            self.edges.append(attributes["data-kind"])

    def by_node(self) -> dict[str, dict]:
        return {node["data-node"]: node for node in self.nodes}


@pytest.fixture(scope="module")
def sampled() -> Trace:
    return record_tiny_trace(tree=TreeShape.parse("3x2x1:2"))


@pytest.fixture(scope="module")
def greedy(bundled_pair) -> Trace:
    request = RunRequest(pair="pycode-distilled", prompt=CODE, tree="3x2x1:2", max_new_tokens=24)
    return recorder.measure_run(bundled_pair, request.prompt, request.settings(), request.drafter, repeat_budget_s=0)


def tree_cycles(trace: Trace):
    return [cycle for cycle in trace.cycles if cycle.is_tree]


def test_every_node_is_drawn_in_its_state_with_the_path_marked(sampled, greedy):
    for trace in (sampled, greedy):
        for cycle in tree_cycles(trace):
            drawn = Nodes(tree_html(trace, cycle.index, decided=True))
            nodes = drawn.by_node()
            assert len(drawn.nodes) == len(cycle.positions) + 2, "every node, the root and the target's own token"
            for node, position in enumerate(cycle.positions):
                assert nodes[str(node)]["status"] == position.status, f"cycle {cycle.index + 1}, node {node}"
                assert nodes[str(node)]["data-branch"] == str(branch_of(cycle.parents, node))
            on_path = {name for name, node in nodes.items() if node.get("data-path") == "1"}
            assert on_path == {str(node) for node in cycle.path} | {"target"}, "the path and the target's token, bold"
            kind = "bonus" if cycle.bonus_token_id is not None else "resampled"
            assert nodes["target"]["status"] == kind and nodes["target"]["data-depth"] == str(cycle.n_accepted + 1)
            assert nodes["-1"]["status"] == "prompt", "the root is the last committed token"
            assert len(drawn.edges) == len(cycle.positions) + 1 and drawn.edges.count("path") == cycle.n_accepted


def test_before_the_decision_every_node_is_drafted_and_no_target_token_is_drawn(sampled):
    cycle = tree_cycles(sampled)[0]
    drawn = Nodes(tree_html(sampled, cycle.index, decided=False))
    statuses = [node["status"] for node in drawn.nodes if node["data-node"] != "-1"]
    assert statuses == ["drafted"] * len(cycle.positions) and "target" not in drawn.by_node()


def test_hovering_a_tested_node_shows_p_q_and_u_as_the_stream_does(sampled):
    tested = 0
    for cycle in tree_cycles(sampled):
        nodes = Nodes(tree_html(sampled, cycle.index, decided=True)).by_node()
        for node, position in enumerate(cycle.positions):
            tip = nodes[str(node)]["tip"]
            assert f"q(x) = {position.q:.3f}" in tip
            if position.status == "unverified":
                assert "never tested" in tip and "p(x)" not in tip
                continue
            tested += 1
            comparison = "≤" if position.status == "accepted" else ">"
            assert f"p(x) = {position.p:.3f}" in tip
            assert f"u = {position.u:.3f} {comparison} {position.accept_probability:.3f} → {position.status}" in tip
    assert tested > len(tree_cycles(sampled)), "the sampled trace tests several branches per cycle"


def test_the_layout_gives_every_leaf_a_row_and_a_parent_the_middle_of_its_children():
    parents = (-1, -1, -1, 0, 0, 1, 3)  # three at depth 1; node 0 has two children, node 1 one, node 3 one
    rows, n_rows = rows_of(parents)
    leaves = [node for node in range(len(parents)) if not children_of(parents, node)]
    assert n_rows == len(leaves) and sorted(rows[leaf] for leaf in leaves) == list(range(n_rows))
    assert rows[0] == (rows[3] + rows[4]) / 2 and rows[-1] == (rows[0] + rows[2]) / 2


def test_a_chain_is_not_drawn_as_a_tree():
    chain = record_tiny_trace()
    assert all(tree_html(chain, cycle.index, True) == "" for cycle in chain.cycles)


def test_step_walks_the_tree_depth_by_depth_with_the_tests_numbers(sampled):
    walked = 0
    for cycle in tree_cycles(sampled):
        said = narration(sampled, cycle.index, "decide")
        node = -1
        for depth in range(1, cycle.n_accepted + 2):
            tested = [c for c in children_of(cycle.parents, node) if cycle.positions[c].status != "unverified"]
            if not tested:
                break
            assert f"depth {depth}: " in said
            for child in tested:
                position = cycle.positions[child]
                comparison = "≤" if position.status == "accepted" else ">"
                words = f"branch {branch_of(cycle.parents, child)} '{position.text}' {position.status}, u = {position.u:.2f} {comparison} p/q = {position.accept_probability:.2f}"
                assert words in said.replace("&lt;", "<").replace("&gt;", ">"), said
                walked += 1
            node = next((c for c in tested if cycle.positions[c].status == "accepted"), None)
            if node is None:
                assert "from the residual" in said
                break
        assert f"**{len(cycle.emitted_token_ids)} token" in said
    assert walked > 0
    assert "the draft grew a token tree 3×2×1, top 2 branch" in narration(sampled, 0, "draft")
    assert "one** forward pass of 10 rows" in narration(sampled, 0, "verify")


def test_under_greedy_the_walk_names_the_targets_top_token(greedy):
    said = " ".join(narration(greedy, cycle.index, "decide") for cycle in tree_cycles(greedy))
    assert "accepted: the target's top token" in said
    assert re.search(r"depth [23]: branch \d", said), "the bundled draft agrees often: the walk goes deeper than depth 1"
    assert "u =" not in said, "greedy tests no coin"


def test_the_stream_shows_only_a_trees_emitted_text(sampled, greedy):
    for trace in (sampled, greedy):
        html = stream_html(trace)
        assert 'data-status="rejected"' not in html and 'data-status="unverified"' not in html
        new_tokens = (
            html.count('data-status="accepted"') + html.count('data-status="bonus"') + html.count('data-status="resampled"')
        )
        assert new_tokens == trace.summary.new_tokens == sum(len(cycle.emitted_token_ids) for cycle in trace.cycles)
    drafting = stream_html(sampled, shown_cycles=1, phase="draft")
    assert "sv-tree-mark" in drafting and 'data-status="drafted"' not in drafting


def test_the_race_names_the_shape_and_shows_tokens_per_pass_and_verify_cost(greedy):
    m = readings_of_trace(greedy)
    html = race_html(greedy, m, 1.0)
    assert "a token tree 3×2×1, top 2 branch" in html
    assert f"{m.tokens_per_cycle:.2f} tokens per target pass · ν = {m.verify_cost:.2f}" in html
    assert html.count("animation-delay") == greedy.summary.new_tokens + greedy.baseline.new_tokens
    assert "the two texts are identical" in html, "a greedy tree writes the target's own text"
    assert not greedy.started.rows_exact and "exact only up to rounding" in html, "a float target's run says so"
    exact = copy.copy(greedy)
    exact.started = replace(greedy.started, rows_exact=True)
    assert "as exact speculative decoding guarantees" in race_html(exact, m, 1.0)


def test_the_inspector_offers_each_tree_cycles_target_distribution(sampled):
    choices = inspector_choices(sampled.cycles)
    trees = tree_cycles(sampled)
    assert [value for _, value in choices[: len(trees)]] == [f"{c.index}:{len(c.positions)}" for c in trees]


@pytest.mark.parametrize(
    "typed,read",
    [("chain", "chain"), ("", "chain"), (None, "chain"), (" CHAIN ", "chain"), ("3 x 2 x 1 : 2", "3x2x1:2"), ("4×2", "4x2")],
)
def test_the_tree_field_reads_chain_or_a_shape(typed, read):
    request = RunRequest.from_values({"pair": "pycode-distilled", "prompt": "x", "tree": typed})
    assert request.tree == read
    assert (request.settings().tree is None) == (read == "chain")


@pytest.mark.parametrize(
    "typed,said",
    [
        (
            "<img src=x>",
            "Token tree must be 'chain', children per depth such as 3x2x1 (optionally :N), or nodes=16,depth=5 "
            "(at most 64 nodes, 16 deep) (got text).",
        ),
        ("9x9", "at most 64 nodes ('9x9' is 2 deep with 90 nodes)"),
        ("2x0", "has a depth with no children"),
        ("nodes=8", "needs both nodes= and depth="),
        (3, "(got 3)"),
    ],
)
def test_a_wrong_tree_is_one_sentence_naming_the_field(typed, said):
    with pytest.raises(InputError) as caught:
        RunRequest.from_values({"pair": "pycode-distilled", "prompt": "x", "tree": typed})
    assert said in str(caught.value) and str(caught.value).startswith("Token tree must be")
    assert "<img" not in str(caught.value), "the sentence never repeats what was sent"


def test_a_tree_with_a_chain_only_drafter_or_lenient_acceptance_is_refused():
    tree = RunRequest(pair="pycode-distilled", prompt="x", tree="2x2")
    with pytest.raises(
        InputError, match="dynamic drafter drafts chains only; a tree needs one of model, feature, eagle3, lookup"
    ):
        replace(tree, drafter="dynamic").settings()
    with pytest.raises(SettingsError, match="chains only"):
        replace(tree, verification="lenient").settings()


def test_chain_or_tree_compares_the_same_rows_on_the_bundled_pair_without_a_real_one():
    lesson = next(lesson for lesson in lessons("pycode-distilled", "pycode-plain") if lesson.key == "lesson-11")
    (_, chain), tree = lesson.extra[0], lesson.request
    assert tree.pair == chain.pair == "pycode-distilled" and tree.drafter == chain.drafter == "model"
    assert tree.prompt == chain.prompt and chain.tree == "chain"
    assert chain.gamma + 1 == TreeShape.parse(tree.tree).n_nodes + 1, "the same rows in each verify pass"
    real = next(
        lesson for lesson in lessons("pycode-distilled", "pycode-plain", "smollm2-135m-distilled", 1) if lesson.key == "lesson-11"
    )
    assert real.request.pair == "smollm2-135m-distilled" and real.request.drafter == "feature"


def test_chain_or_tree_explains_its_own_measurements(bundled_pair):
    lesson = next(lesson for lesson in lessons("pycode-distilled", "pycode-plain") if lesson.key == "lesson-11")

    def measured(label: str, request: RunRequest) -> Measured:
        request = replace(request, max_new_tokens=24)
        trace = recorder.measure_run(bundled_pair, request.prompt, request.settings(), request.drafter, repeat_budget_s=0)
        return Measured(label, request, trace, readings_of_trace(trace))

    tree, chain = measured("tree", lesson.request), measured(*lesson.extra[0])
    text = lesson.explain(tree, [chain])
    assert "Question" in text and "9 rows" in text
    assert "a token tree 4×2×1×1, top 1 branch" in text and "a chain of γ = 8" in text
    for m in (tree.readings, chain.readings):
        for value in (m.tokens_per_cycle, m.verify_cost, m.measured_speedup, m.speedup_if_verify_costs_one_step):
            assert f"{value:.2f}" in text, f"{value:.2f} measured in this lesson is missing from its text"
        assert (
            m.speedup_if_verify_costs_one_step
            >= m.tokens_per_cycle
            / ((m.tally.draft_s + m.tally.verify_s + m.tally.overhead_s) / m.tally.cycles / m.tau_denominator_s)
            or m.verify_cost < 1
        ), "counting the verify pass as one step never slows a cycle whose pass cost more"
    gain = tree.readings.tokens_per_cycle - chain.readings.tokens_per_cycle
    assert f"{abs(gain):.2f} {'more' if gain >= 0 else 'fewer'}" in text


def test_after_a_plain_last_step_the_drawing_keeps_the_latest_tree(sampled):
    from specviz.ui.tree_view import current_tree_html

    last = sampled.cycles[-1]
    assert not last.is_tree, "the tiny run ends at the token limit with a plain target step"
    shown = Nodes(current_tree_html(sampled, len(sampled.cycles), decided=True))
    latest = tree_cycles(sampled)[-1]
    assert len(shown.nodes) == len(latest.positions) + 2 and f'data-cycle="{latest.index}"' in current_tree_html(
        sampled, len(sampled.cycles), True
    )
    assert current_tree_html(sampled, 0, True) == "" and current_tree_html(record_tiny_trace(), 3, True) == ""


def test_a_trees_summary_and_verdict_quote_no_chain_prediction(greedy):
    from specviz.ui.views import Recording, frame

    last = frame(Recording.of(greedy), len(greedy.cycles), "decide", 1.0, True)
    assert "predicted from α, τ, γ" not in last.summary and "predicts no tree" in last.summary
    assert "token tree 3x2x1:2" in last.verdict and "suggests γ" not in last.verdict and "Predicted at γ" not in last.verdict


def test_chain_or_tree_runs_on_the_real_pairs_feature_head(real_pair):
    lesson = next(
        lesson for lesson in lessons("pycode-distilled", "pycode-plain", real_pair.name, 1) if lesson.key == "lesson-11"
    )
    runs = []
    for label, request in (("tree", lesson.request), lesson.extra[0]):
        request = replace(request, max_new_tokens=32)
        trace = recorder.measure_run(real_pair, request.prompt, request.settings(), request.drafter, repeat_budget_s=0)
        runs.append(Measured(label, request, trace, readings_of_trace(trace)))
    tree, chain = runs
    assert tree.trace.started.tree == "4x2x1x1:1" and tree_cycles(tree.trace), "the feature head grew trees"
    assert tree.trace.summary.new_token_ids == tree.trace.baseline.new_token_ids, "greedy: the target's own text"
    text = lesson.explain(tree, [chain])
    assert f"{tree.readings.tokens_per_cycle:.2f}" in text and f"{chain.readings.verify_cost:.2f}" in text


def test_a_shared_trees_strings_are_drawn_as_text(sampled):
    """A trace is hostile until checked: its token texts and its shape reach the drawing, the walk and the race as text."""
    import json

    from specviz.ui.views import Recording, frame

    markup = "<img src=x onerror=alert(1)> **b**"
    raw = json.loads(sampled.to_json())
    raw["started"]["tree"] = "<b>b</b>"
    for cycle in raw["cycles"]:
        cycle["new_token_text"] = markup
        for position in cycle["positions"]:
            position["text"] = markup
    trace = Trace.from_json(json.dumps(raw))
    recording = Recording.of(trace)
    shown = []
    for n in range(1, len(trace.cycles) + 1):
        for phase in ("draft", "verify", "decide"):
            now = frame(recording, n, phase, 1.0, False)
            shown += [now.tree, now.narration, now.stream]
    shown.append(frame(recording, len(trace.cycles), "decide", 1.0, False).race)
    assert any("&lt;img" in view for view in shown), "the texts are there, escaped"
    for view in shown:
        assert "<img" not in view and "<b>b" not in view, f"markup from the file reached the page: {view[:300]!r}"
