"""A tree's expected tokens per pass against Leviathan's chain formula, an enumeration of every outcome, the engine's
own greedy acceptance (Monte Carlo) and the engine's tree growth; the hardware-aware choice against the chain's best γ."""

from __future__ import annotations

import itertools
import json
import random

import pytest
import torch

from specviz.analysis import theory
from specviz.analysis.tree_theory import (
    MAX_DEPTH,
    ROOT,
    RankAcceptance,
    choose_tree,
    expected_tokens_of_shape,
    expected_tokens_per_pass,
    family,
    flat_verify_costs,
    measured_rank_acceptance,
    path_acceptance,
    price,
    rows_of,
    shape_tree,
    why_trees_pay_sentence,
)
from specviz.drafting.growth import grow_tree
from specviz.engine.acceptance import judge
from specviz.engine.settings import SamplingSettings
from specviz.engine.tree import TokenTree
from specviz.engine.tree_shape import TreeShape
from tests.test_cli import heavy_modules_imported_by, specviz, specviz_json

REAL_PAIR = RankAcceptance.from_coverage([0.53, 0.65, 0.72, 0.75, 0.77])  # issue 28: top-1 … top-5 coverage
CPU_NU = [1.00, 1.08, 1.15, 1.19, 1.56, 1.57, 1.59, 1.59, 1.98, 1.95, 1.96, 1.99, 2.29, 2.30, 2.30, 2.30]  # docs/performance.md
SHAPES = [((1,), None), ((3,), None), ((2, 1), None), ((3, 2), None), ((2, 2, 1), 1), ((4, 2, 1, 1), 1), ((3, 3, 2), 2)]


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.53, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("gamma", [1, 2, 5, 12])
def test_a_chain_is_leviathans_formula(alpha, gamma):
    chain = list(range(-1, gamma - 1))
    leviathan = theory.expected_tokens_per_cycle(alpha, gamma)
    assert expected_tokens_per_pass(chain, [alpha] * gamma) == pytest.approx(leviathan, rel=1e-12, abs=1e-12)
    assert expected_tokens_of_shape((1,) * gamma, None, RankAcceptance.of([alpha])) == pytest.approx(leviathan, rel=1e-12)


def outcome_enumeration(parents: list[int], acceptance: RankAcceptance, depth: int) -> float:
    """E by brute force: every sequence of the target's choices (rank 1…R, or a token the draft did not rank) down
    `depth` levels, with its probability, walked down the tree: accepted nodes + the target's own token."""
    children = {node: [c for c, p in enumerate(parents) if p == node] for node in [ROOT, *range(len(parents))]}
    ranks = max(acceptance.ranks(d) for d in range(1, depth + 1))
    total = 0.0
    for choices in itertools.product([*range(1, ranks + 1), None], repeat=depth):
        probability, node, accepted = 1.0, ROOT, 0
        for level, rank in enumerate(choices, start=1):
            rates = acceptance.by_depth[min(level, len(acceptance.by_depth)) - 1]
            probability *= (1 - sum(rates)) if rank is None else acceptance.rate(level, rank)
        for rank in choices:
            if rank is None or rank > len(children[node]):
                break
            node, accepted = children[node][rank - 1], accepted + 1
        total += probability * (1 + accepted)
    return total


@pytest.mark.parametrize("branching,expanded", SHAPES)
@pytest.mark.parametrize(
    "acceptance",
    [RankAcceptance.of([0.5, 0.2, 0.1]), REAL_PAIR, RankAcceptance(((0.6, 0.3), (0.4, 0.1, 0.05), (0.7,)))],
    ids=["three-ranks", "real-pair", "by-depth"],
)
def test_every_form_equals_the_enumeration_of_outcomes(branching, expanded, acceptance):
    parents, rates = shape_tree(branching, expanded, acceptance)
    assert len(parents) + 1 == rows_of(branching, expanded) == TreeShape(branching, expanded).n_nodes + 1
    exact = outcome_enumeration(parents, acceptance, len(branching))
    assert expected_tokens_per_pass(parents, rates) == pytest.approx(exact, rel=1e-12)
    assert expected_tokens_of_shape(branching, expanded, acceptance) == pytest.approx(exact, rel=1e-12)


def test_the_family_sums_each_shape_as_the_reference_does():
    seen = set()
    for branching, expanded, rows, tokens in family(REAL_PAIR, max_rows=16):
        assert (branching, expanded) not in seen, f"{branching}, top {expanded} is listed twice"
        seen.add((branching, expanded))
        assert rows == rows_of(branching, expanded) <= 16 and len(branching) <= MAX_DEPTH
        assert tokens == pytest.approx(expected_tokens_of_shape(branching, expanded, REAL_PAIR), rel=1e-12), (branching, expanded)
        if expanded is not None:  # a top n that no depth exceeds is the "all branch" tree, already listed
            assert rows_of(branching, expanded) < rows_of(branching, None), (branching, expanded)
    assert ((4, 2, 1, 1), 1) in seen and ((1,) * 15, None) in seen and len(seen) > 200


def random_tree(rng: random.Random, n_nodes: int) -> tuple[list[int], list[float]]:
    """Random parents, and per-node acceptances whose siblings add up to at most 1."""
    parents = [ROOT] + [rng.randrange(-1, node) for node in range(1, n_nodes)]
    rates = [0.0] * n_nodes
    for parent in [ROOT, *range(n_nodes)]:
        kids = [c for c, p in enumerate(parents) if p == parent]
        weights = [rng.random() for _ in range(len(kids) + 1)]  # the last: the target's token is no child's
        for kid, weight in zip(kids, weights):
            rates[kid] = weight / sum(weights)
    return parents, rates


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_engines_greedy_acceptance_yields_the_formula(seed):
    """Monte Carlo through engine/acceptance.py: at each row the target's argmax is child i's token with that
    child's acceptance, else a token no child holds; the mean of accepted + 1 over 20,000 passes matches E."""
    rng = random.Random(seed)
    parents, rates = random_tree(rng, 12)
    tree = TokenTree(tuple(1 + c for c in range(len(parents))), tuple(parents))  # node c holds token c + 1; 0 is no child's
    vocab, trials = len(parents) + 1, 20_000
    rows = torch.zeros(len(parents) + 1, vocab)  # per row (root, then each node): the chance of each argmax
    for row, node in enumerate([ROOT, *range(len(parents))]):
        for child in tree.children(node):
            rows[row, child + 1] = rates[child]
        rows[row, 0] = 1 - rows[row, 1:].sum()
    generator = torch.Generator().manual_seed(seed)
    argmax = torch.multinomial(rows.clamp(min=0), trials, replacement=True, generator=generator).T  # (trials, rows)
    logits = torch.nn.functional.one_hot(argmax, vocab).float()  # (trials, rows, vocab)
    tokens = [judge(logits[t], tree, None, SamplingSettings(), generator, "independent").n_accepted + 1 for t in range(trials)]
    mean = sum(tokens) / trials
    spread = (sum((x - mean) ** 2 for x in tokens) / trials) ** 0.5
    expected = expected_tokens_per_pass(parents, rates)
    assert abs(mean - expected) < 4 * spread / trials**0.5, f"measured {mean:.4f} tokens per pass, formula {expected:.4f}"


@pytest.mark.parametrize("branching,expanded", SHAPES)
def test_the_engine_grows_the_tree_the_theory_prices(branching, expanded):
    """grow_tree with a draft whose rank-r token has q ∝ a_r (so it ranks paths as they are accepted) builds a tree
    whose E, with each node's rate by its rank among its siblings, is the theory's for the shape."""
    acceptance = RankAcceptance.of([0.5, 0.25, 0.12, 0.05])
    vocab = 8
    rates = torch.tensor([*acceptance.by_depth[0], *[1e-6] * (vocab - 4)])
    logits = rates.log()  # (vocab,): the draft ranks token r − 1 at rank r, everywhere

    def feed(tree: TokenTree, nodes: list[int]) -> torch.Tensor:
        return logits.expand(len(nodes), vocab)

    proposal, _ = grow_tree(
        logits[None], TreeShape(branching, expanded), feed, SamplingSettings(), "independent", torch.Generator()
    )
    tree = proposal.tree
    node_rates = [
        acceptance.rate(tree.depths[node], tree.children(tree.parents[node]).index(node) + 1) for node in range(len(tree))
    ]
    assert len(tree) + 1 == rows_of(branching, expanded)
    assert expected_tokens_per_pass(list(tree.parents), node_rates) == pytest.approx(
        expected_tokens_of_shape(branching, expanded, acceptance), rel=1e-12
    )


@pytest.mark.parametrize("alpha,tau", [(0.8, 0.05), (0.53, 0.05), (0.9, 0.01), (0.6, 0.3), (0.97, 0.0)])
def test_with_one_rank_and_flat_nu_the_choice_is_leviathans_best_gamma(alpha, tau):
    choice = choose_tree(RankAcceptance.of([alpha]), tau, flat_verify_costs(64))
    gamma, speedup = theory.best_gamma(alpha, tau, limit=MAX_DEPTH, verify_cost=1.0)
    assert choice.tree == choice.chain and choice.chain.depth == gamma and choice.chain.text == "x".join(["1"] * gamma)
    assert choice.chain.speedup == pytest.approx(speedup, rel=1e-12)


def test_the_real_pair_wants_a_wide_tree_on_a_gpu_and_a_small_one_on_two_cores():
    flat = choose_tree(REAL_PAIR, 0.05, flat_verify_costs(64))
    cpu = choose_tree(REAL_PAIR, 0.05, dict(enumerate(CPU_NU, start=1)))
    assert cpu.max_rows == 16 and cpu.tree.rows <= 16
    assert flat.tree.rows > 2 * cpu.tree.rows, (flat.tree, cpu.tree)
    assert flat.tree.speedup / flat.chain.speedup > cpu.tree.speedup / cpu.chain.speedup
    every = [price(b, e, REAL_PAIR, 0.05, dict(enumerate(CPU_NU, start=1))) for b, e, *_ in family(REAL_PAIR, 16)]
    assert cpu.tree.speedup == pytest.approx(max(option.speedup for option in every), rel=1e-12)
    sentence = why_trees_pay_sentence(cpu, flat, dict(enumerate(CPU_NU, start=1)))
    assert f"{flat.tree.rows} rows" in sentence and "known only to 16 rows" in sentence


def test_trees_priced_at_their_own_tau_lose_to_chains_when_their_forwards_cost_more():
    costs = dict(enumerate(CPU_NU, start=1))
    alike = choose_tree(REAL_PAIR, 0.05, costs)
    assert not alike.tree.is_chain, "at one τ the real pair's best shape on two cores is a tree"
    dear = choose_tree(REAL_PAIR, 0.05, costs, tree_tau=0.5)
    assert dear.tree.is_chain and dear.tree == dear.chain == alike.chain, "the chains are priced as before"
    assert dear.best_tau == 0.05 and alike.best_tau == 0.05
    cheap = choose_tree(REAL_PAIR, 0.5, costs, tree_tau=0.05)
    assert not cheap.tree.is_chain and cheap.best_tau == 0.05
    assert cheap.tree.draft_cost == pytest.approx(cheap.tree.depth * 0.05) and cheap.chain.draft_cost == pytest.approx(
        cheap.chain.depth * 0.5
    )
    with pytest.raises(ValueError, match="τ must be ≥ 0"):
        choose_tree(REAL_PAIR, 0.05, costs, tree_tau=-0.1)


@pytest.mark.parametrize(
    "call,complaint",
    [
        (lambda: path_acceptance([ROOT, ROOT], [0.7, 0.4]), "add up to 1.100 > 1"),
        (lambda: path_acceptance([ROOT, 1], [0.5, 0.5]), "must come before it"),
        (lambda: path_acceptance([ROOT], [1.5]), "in [0, 1]"),
        (lambda: RankAcceptance.of([0.6, 0.5]), "add up to 1.100 > 1"),
        (lambda: RankAcceptance.from_coverage([0.6, 0.5]), "cannot fall"),
        (lambda: choose_tree(REAL_PAIR, 0.1, {1: 1.0}), "at least 2 rows"),
    ],
)
def test_impossible_inputs_are_refused(call, complaint):
    with pytest.raises(ValueError, match=complaint.replace("[", r"\[").replace("]", r"\]")):
        call()


REAL_PAIR_FLAGS = ["theory", "--tree-choice", "--acceptance-by-rank", "0.53,0.12,0.07,0.03,0.02", "--tau", "0.07"]


def test_theory_tree_choice_json_is_the_functions_choice():
    output = specviz_json(*REAL_PAIR_FLAGS, "--nu", ",".join(map(str, CPU_NU)), "--json")
    cpu = choose_tree(REAL_PAIR, 0.07, dict(enumerate(CPU_NU, start=1)))
    assert output["best"] == cpu.tree.to_json() and output["best_chain"] == cpu.chain.to_json()
    assert output["flat"]["best"] == choose_tree(REAL_PAIR, 0.07, flat_verify_costs(64)).tree.to_json()
    assert output["verify_curve"] == {str(k): nu for k, nu in enumerate(CPU_NU, start=1)} and output["max_rows"] == 16
    assert output["sentence"] == why_trees_pay_sentence(
        cpu, choose_tree(REAL_PAIR, 0.07, flat_verify_costs(64)), output_curve(output)
    )


def output_curve(output: dict) -> dict[int, float]:
    return {int(k): nu for k, nu in output["verify_curve"].items()}


def test_theory_tree_choice_prints_both_choices_and_the_sentence():
    text = specviz(*REAL_PAIR_FLAGS, "--nu", ",".join(map(str, CPU_NU))).stdout
    assert text.count("  best chain ") == 2 and "with ν flat" in text and "rows cost nothing" in text, text
    flat_only = specviz(*REAL_PAIR_FLAGS, "--max-rows", "8").stdout
    assert "with ν flat" not in flat_only and "passes of up to 8 rows" in flat_only, flat_only


def test_theory_reads_the_curve_hardware_saved(tmp_path):
    entry = {"pair": "p", "device": "cpu", "dtype": "float32", "device_name": "here", "measured_at": "2026-12-04T00:00:00Z"}
    curve = {str(k): 1.0 + 0.1 * (k - 1) for k in range(1, 33)}
    (tmp_path / "hardware.json").write_text(json.dumps({"p|cpu|float32": {**entry, "verify_curve": curve}}))
    output = specviz_json(*REAL_PAIR_FLAGS, "--nu", "saved", "--pair", "p", "--json", env={"SPECVIZ_CACHE": str(tmp_path)})
    assert output["max_rows"] == 32 and output["verify_curve"] == curve and "measured by `hardware` for p" in output["nu_source"]
    missing = specviz(*REAL_PAIR_FLAGS, "--nu", "saved", "--pair", "q", env={"SPECVIZ_CACHE": str(tmp_path)})
    assert missing.returncode == 2 and "hardware --pair q --rows 64 --save" in missing.stderr, missing.stderr


@pytest.mark.parametrize(
    "args,complaint",
    [
        (["theory", "--tau", "0.1"], "--alpha and --gamma are required"),
        (["theory", "--tree-choice", "--tau", "0.1"], "needs --acceptance-by-rank"),
        ([*REAL_PAIR_FLAGS[:3], "0.7,0.4", "--tau", "0.1"], "add up to 1.100 > 1"),
        ([*REAL_PAIR_FLAGS[:3], "0.7,x", "--tau", "0.1"], "--acceptance-by-rank"),
        ([*REAL_PAIR_FLAGS, "--nu", "1.2,1.3"], "ν(1) is one step"),
        ([*REAL_PAIR_FLAGS, "--nu", "gpu"], "flat, saved or a comma list"),
        ([*REAL_PAIR_FLAGS, "--nu", "1"], "at least 2 rows"),
        ([*REAL_PAIR_FLAGS, "--nu", "saved"], "needs --pair"),
        ([*REAL_PAIR_FLAGS, "--max-rows", "65"], "--max-rows"),
    ],
)
def test_bad_tree_choice_arguments_are_one_line(args, complaint):
    result = specviz(*args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and complaint in lines[0], result.stderr


def test_the_tree_choice_loads_no_torch():
    imported = heavy_modules_imported_by(*REAL_PAIR_FLAGS, "--json")
    assert imported == [], f"the tree choice imported {imported}"


def test_the_acceptance_a_run_measured_by_depth_and_rank_predicts_its_own_tokens_per_pass():
    """Three cycles of the tree 2×1: node 1 (the draft's 2nd choice) accepted, its child rejected; node 0 then its
    child accepted (a leaf: the bonus); nothing accepted. Measured: (2 + 3 + 1) / 3 = 2 tokens per pass."""
    parents = (-1, -1, 0, 1)
    acceptance = measured_rank_acceptance([(parents, (1,)), (parents, (0, 2)), (parents, ())])
    assert acceptance.by_depth == ((1 / 3, 1 / 3), (1 / 2, 0.0))
    assert expected_tokens_of_shape((2, 1), None, acceptance) == pytest.approx(2.0)
    assert measured_rank_acceptance([]) is None
