"""`--gamma auto` and the pair's own γ as every command's default (deployment/auto_setting.py, cli/options.py)."""

from __future__ import annotations

import pytest

from specviz.analysis.same_drafts import JudgedCycle
from specviz.analysis.tree_theory import RankAcceptance, choose_tree, expected_tokens_of_shape
from specviz.cli.options import AUTO, UsageError, gammas_from
from specviz.deployment.auto_setting import AutoChoice, chain_acceptance, choose_setting
from specviz.engine import DecodeSettings
from specviz.models.catalogue import load_catalogue


def test_gamma_defaults_to_the_pairs_own():
    catalogue = load_catalogue()
    assert gammas_from(None, catalogue.get("pycode-distilled")) == [catalogue.get("pycode-distilled").gamma]
    assert gammas_from(None, catalogue.get("smollm2-135m-distilled")) == AUTO  # models.yaml: gamma: auto
    assert catalogue.get("smollm2-135m-distilled").start_gamma == 1
    assert gammas_from("2,4", catalogue.get("pycode-distilled")) == [2, 4]
    assert gammas_from(" Auto ", catalogue.get("pycode-distilled")) == AUTO
    for wrong in ("four", "2,x", "0", "99"):
        with pytest.raises((UsageError, ValueError)):
            gammas_from(wrong, catalogue.get("pycode-distilled"))


def test_a_chains_acceptance_is_conditional_on_the_positions_before():
    cycles = [JudgedCycle.of_counts(3, n) for n in (0, 1, 3, 2)]
    acceptance = chain_acceptance(cycles)
    # position 1 tested 4 times, accepted 3; position 2 tested 3 times (after an accepted 1), accepted 2; position 3: 1 of 2
    assert acceptance.by_depth == ((0.75,), (2 / 3,), (0.5,))


def test_when_nothing_pays_one_sentence_says_so_with_the_best_prediction():
    steep = {1: 1.0, 2: 1.6, 3: 2.2, 4: 2.8}
    choice = AutoChoice(choose_tree(RankAcceptance.of([0.1]), 0.4, steep, 4), steep)
    assert not choice.pays
    sentence = choice.sentence()
    assert sentence.startswith(f"on this machine no draft length pays for this pair: best predicted {choice.best.speedup:.2f}×")
    assert choice.best.speedup < 1 and "\n" not in sentence


def test_the_choice_on_the_bundled_pair_is_the_theorys_best(bundled_pair):
    prompts = ["def fibonacci(n):\n", "class Stack:\n    def push(self, item):\n"]
    chosen = choose_setting(bundled_pair, prompts, DecodeSettings(max_new_tokens=32), "model")
    best = chosen.best
    acceptance = chosen.choice.acceptance
    assert best.tokens_per_pass == pytest.approx(expected_tokens_of_shape(best.branching, best.expanded, acceptance))
    assert best.speedup == pytest.approx(best.tokens_per_pass / (chosen.verify_costs[best.rows] + best.depth * chosen.choice.tau))
    assert chosen.choice.chain.speedup <= best.speedup  # the winner is at least as fast as the best chain
    assert chosen.verify_costs[1] == pytest.approx(1.0) and set(chosen.verify_costs) == set(range(1, 9))
    assert (chosen.tree is None) == best.is_chain and chosen.gamma == chosen.choice.chain.depth
    assert chosen.to_json()["sentence"] == chosen.sentence()
