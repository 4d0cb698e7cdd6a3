"""`gamma: auto`, every pair's default: measured once per machine and pair, kept in specviz's cache and reused
(deployment/gamma_auto.py, cli/options.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from specviz.analysis.readings import verify_costs_in_run
from specviz.analysis.same_drafts import JudgedCycle
from specviz.analysis.tree_theory import RankAcceptance, choose_tree, expected_tokens_of_shape
from specviz.cli.options import AUTO, UsageError, gammas_from, pair_from
from specviz.deployment import gamma_auto
from specviz.deployment.gamma_auto import AutoChoice, chain_acceptance, choose_setting
from specviz.engine import DecodeSettings, SamplingSettings
from specviz.engine.tree_shape import TreeShape
from specviz.models.catalogue import Pair, load_catalogue
from specviz.run.chosen_setting import ChosenSetting, verify_cost_moved
from tests.test_cli import specviz

MIB = 2**20


def test_every_pair_and_a_command_line_pair_default_to_auto():
    catalogue = load_catalogue()
    for name, pair in catalogue.pairs.items():
        assert pair.gamma == AUTO, f"{name} fixes γ {pair.gamma}: every pair's default is measured on the machine that runs"
        assert gammas_from(None, pair) == AUTO and pair.start_gamma == 1
    adhoc = Pair(target="t", draft="d", description="from the command line")
    assert adhoc.gamma == AUTO, "--target/--draft pairs are auto too"
    args = type("Args", (), {"target": "t", "draft": "d", "pair": None})()
    assert pair_from(args)[1].gamma == AUTO
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


STEEP = {1: 1.0, 2: 1.9, 3: 2.8, 4: 3.6, 5: 4.4}  # a CPU whose cache holds the target: every extra row costs a step


def choice_of(alpha: float, tau: float, costs: dict[int, float], weights: int | None, cache: int | None) -> AutoChoice:
    return AutoChoice(choose_tree(RankAcceptance.of([alpha]), tau, costs, max(costs)), costs, weights, cache)


def test_when_nothing_pays_because_the_pass_is_dear_the_sentence_says_where_the_weights_sit():
    choice = choice_of(0.6, 0.02, STEEP, 64 * MIB, 480 * MIB)
    assert not choice.pays
    best = choice.best
    assert best.tokens_per_pass / (1 + best.draft_cost) > 1.05, "a verify pass as cheap as one step would pay here"
    sentence = choice.sentence()
    assert sentence.startswith(
        f"on this machine nothing pays for this pair: the target's 64 MiB sit in this CPU's 480 MiB cache, so a "
        f"{best.rows}-row pass costs {best.verify_cost:.2f} steps"
    )
    assert f"best predicted {best.speedup:.2f}×" in sentence and "\n" not in sentence
    streamed = choice_of(0.6, 0.02, STEEP, 2048 * MIB, 32 * MIB).sentence()
    assert "stream from memory (this CPU's cache is 32 MiB)" in streamed and "the kernels' arithmetic" in streamed
    unknown = choice_of(0.6, 0.02, STEEP, 64 * MIB, None).sentence()
    assert f"a {best.rows}-row verify pass costs {best.verify_cost:.2f} target steps here" in unknown


def test_when_nothing_pays_because_the_draft_is_poor_the_sentence_says_alpha_against_tau():
    flat = {1: 1.0, 2: 1.0, 3: 1.0}
    choice = choice_of(0.1, 0.4, flat, 64 * MIB, 480 * MIB)
    assert not choice.pays
    sentence = choice.sentence()
    assert "the draft is accepted α 0.10 of the time and a draft step costs τ 0.40 target steps" in sentence
    assert "cache" not in sentence, "the cache is not the reason when a free verify pass would not pay either"


def test_when_a_setting_pays_the_sentence_names_it_and_its_prediction():
    choice = choice_of(0.8, 0.05, {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3, 5: 1.4}, 64 * MIB, 32 * MIB)
    assert choice.pays
    chosen = choice.chosen()
    assert choice.sentence().startswith(f"on this machine: {choice.label}, predicted {choice.best.speedup:.2f}× the target alone")
    assert chosen.short() == f"on this machine: {chosen.label}, predicted {chosen.predicted_speedup:.2f}×"
    assert ChosenSetting.from_json(json.loads(json.dumps(chosen.to_json()))) == chosen, "a kept choice reads back whole"


def test_the_choice_on_the_bundled_pair_is_the_theorys_best(bundled_pair):
    prompts = ["def fibonacci(n):\n", "class Stack:\n    def push(self, item):\n"]
    chosen = choose_setting(bundled_pair, prompts, DecodeSettings(max_new_tokens=32), "model")
    best = chosen.best
    acceptance = chosen.choice.acceptance
    assert best.tokens_per_pass == pytest.approx(expected_tokens_of_shape(best.branching, best.expanded, acceptance))
    assert best.speedup == pytest.approx(
        best.tokens_per_pass / (chosen.verify_costs[best.rows] + best.depth * chosen.choice.best_tau)
    )
    assert chosen.choice.chain.speedup <= best.speedup  # the winner is at least as fast as the best chain
    assert set(chosen.verify_costs) == set(range(1, 9))
    assert all(nu > 0 for nu in chosen.verify_costs.values())
    assert (chosen.tree is None) == best.is_chain and chosen.gamma == chosen.choice.chain.depth
    assert chosen.to_json()["sentence"] == chosen.sentence()
    assert chosen.target_weight_bytes == bundled_pair.target.weight_bytes


def test_chains_and_trees_are_priced_at_a_tau_timed_on_their_own_kind(monkeypatch):
    """The calibration drafts a tree, whose forwards cost more than a chain's: a drafter of trees also times a chain,
    each kind is priced at its own τ, the choice is checked once, and the sentence quotes the chosen kind's τ (the
    bundled pair: 0.15–0.17 against 0.08)."""
    acceptance = RankAcceptance.of([0.8, 0.05])
    step_s = 0.010
    per_forward = {"tree": 0.0015, "chain": 0.0008}  # τ 0.15 for a tree's forwards, 0.08 for a chain's
    ran: list[str] = []

    def calibrate(pair, prompts, settings, drafter, shape=None):
        shape = shape or gamma_auto.calibration_shape(True)
        ran.append(shape.text)
        kind = gamma_auto.shape_kind(shape)
        rows = (shape.depth + 1,) * 4
        return gamma_auto.Calibration(acceptance, per_forward[kind], 64, rows, (0.012,) * 4, 0.0, step_s)

    pair = type("Pair", (), {"target": type("T", (), {"model": None, "weight_bytes": 1})(), "shared_vocab_size": 64})()
    pair.device = type("Device", (), {"type": "meta"})()
    monkeypatch.setattr(gamma_auto, "calibrate", calibrate)
    monkeypatch.setattr(
        gamma_auto, "measure_pass_seconds", lambda *a, **k: {k: 0.010 * (1 + 0.05 * (k - 1)) for k in range(1, 9)}
    )
    choice = gamma_auto.choose_setting(pair, ["p"], DecodeSettings(max_new_tokens=32), "model")
    chain = TreeShape.chain(gamma_auto.CALIBRATION_CHAIN).text
    assert ran[:2] == [gamma_auto.CALIBRATION_TREE.text, chain], "a drafter of trees times a chain too, up front"
    assert len(ran) == 3 and TreeShape.parse(ran[2]).is_chain, "then the chosen chain once: both kinds were timed"
    assert (choice.choice.tau, choice.choice.tree_tau) == (pytest.approx(0.08), pytest.approx(0.15))
    assert choice.best.is_chain and choice.best.draft_cost == pytest.approx(choice.best.depth * 0.08)
    assert "τ 0.08" in choice.sentence() and choice.chosen().tau == pytest.approx(0.08)

    per_forward["chain"] = 0.0030  # chains dearer than trees (τ 0.30 against 0.15): a tree wins, priced at its own τ
    ran.clear()
    choice = gamma_auto.choose_setting(pair, ["p"], DecodeSettings(max_new_tokens=32), "model")
    assert ran[:2] == [gamma_auto.CALIBRATION_TREE.text, chain] and len(ran) == 3
    assert not choice.best.is_chain and ran[2] == choice.best.text, "the chosen tree is the one checked"
    assert choice.choice.tau == pytest.approx(0.30) and choice.best.draft_cost == pytest.approx(choice.best.depth * 0.15)


def test_the_choice_is_measured_once_per_machine_and_pair_then_reused(bundled_pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    greedy, measured = SamplingSettings(), []
    first = gamma_auto.remembered_setting(bundled_pair, "model", greedy, on_measure=lambda: measured.append(1))
    assert measured == [1] and not first.reused
    entries = json.loads((tmp_path / "settings.json").read_text())
    (entry,) = entries.values()
    assert entry["conditions"]["pair"] == "pycode-distilled" and entry["conditions"]["drafter"] == "model"
    assert {"cpu", "last_level_cache_bytes", "kernels", "threads", "engine", "weights", "native_kernels", "torch"} <= entry[
        "conditions"
    ].keys()

    again = gamma_auto.remembered_setting(bundled_pair, "model", greedy, on_measure=lambda: measured.append(2))
    assert measured == [1], "the second run reads the kept choice instead of measuring"
    assert again.reused and replace(again, reused=False) == first

    sampled = gamma_auto.conditions(bundled_pair, "model", SamplingSettings(temperature=0.8))
    lookup = gamma_auto.conditions(bundled_pair, "lookup", greedy)
    assert gamma_auto.kept_setting(sampled) is None and gamma_auto.kept_setting(lookup) is None, (
        "another sampling or drafter is another measurement"
    )
    described = gamma_auto.conditions(bundled_pair, "model", greedy)
    moved = {**described, "threads": described["threads"] + 1}
    assert gamma_auto.kept_setting(moved) is None, "another thread count is another measurement"
    other_build = {**described, "glue_threads": {"target": 1, "draft": 1}}
    assert gamma_auto.kept_setting(other_build) is None, "another build of the compiled step is another measurement"


def test_the_conditions_name_every_compiled_parts_glue_threads_a_feature_heads_too():
    """γ auto's key asks each compiled part how its package runs Inductor's loops: a feature head's package
    (FastHead, a CompiledPart) answers too (None: torch's threads), or `specviz run` on a pair with a head fails."""
    from types import SimpleNamespace

    from specviz.engine.compiled import CompiledPart, fast_models

    head = CompiledPart(compile_step=False, device=torch.device("cpu"))
    pair = SimpleNamespace(target=SimpleNamespace(model=SimpleNamespace(_specviz_fast_path=head)), draft=None)
    assert {role: fast.glue_threads for role, fast in fast_models(pair).items()} == {"target": None}


def test_the_choice_keeps_the_memory_read_rate_around_its_calibration(bundled_pair, tmp_path, monkeypatch):
    """The state a prediction was made in travels with it: the mean of the read rates taken before and after the
    calibration, kept in settings.json and read back with the kept choice."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    rates = iter([30.0, 40.0])
    chosen = gamma_auto.remembered_setting(bundled_pair, "model", SamplingSettings(), read_rate=lambda: next(rates))
    assert chosen.read_gb_s == 35.0
    (entry,) = json.loads((tmp_path / "settings.json").read_text()).values()
    assert entry["setting"]["read_gb_s"] == 35.0
    again = gamma_auto.remembered_setting(bundled_pair, "model", SamplingSettings(), read_rate=lambda: 1 / 0)
    assert again.reused and again.read_gb_s == 35.0, "a kept choice is read back, not probed again"


def test_a_measurement_beside_other_work_is_kept_ten_minutes_only(bundled_pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    greedy = SamplingSettings()
    chosen = gamma_auto.remembered_setting(bundled_pair, "model", greedy, own_work=lambda: "loading a pair")
    (entry,) = json.loads((tmp_path / "settings.json").read_text()).values()
    assert entry["busy"] and entry["setting"]["gamma"] == chosen.gamma
    described = gamma_auto.conditions(bundled_pair, "model", greedy)
    assert gamma_auto.kept_setting(described) is not None, "the runs soon after reuse it"
    later = entry["kept_at"] + gamma_auto.BUSY_KEPT_S + 1
    monkeypatch.setattr(gamma_auto.time, "time", lambda: later)
    assert gamma_auto.kept_setting(described) is None, "then it is measured again, the machine quiet or not"


def test_a_choice_drafts_its_tree_only_where_the_settings_verify_one():
    chosen = ChosenSetting(gamma=3, tree="2x1:1", predicted_speedup=1.5)
    exact = chosen.applied(DecodeSettings(gamma=1, compare_verifiers=True))
    assert exact.tree == TreeShape.parse("2x1:1") and exact.gamma == 3 and not exact.compare_verifiers
    for chain_only in (DecodeSettings(lenience=0.5), DecodeSettings(verification="block"), DecodeSettings(adaptive_gamma=True)):
        applied = chosen.applied(chain_only)
        assert applied.tree is None and applied.gamma == 3, "the best chain where the settings take no tree"
    assert chosen.label == "tree 2x1:1" and ChosenSetting(gamma=2).label == "γ 2"


def test_a_verify_cost_that_moved_is_told_apart_from_noise():
    assert verify_cost_moved(1.3, 3.2) and verify_cost_moved(3.2, 1.3)
    assert not verify_cost_moved(1.3, 1.5)
    assert not verify_cost_moved(None, 1.5) and not verify_cost_moved(1.3, None)


def test_run_with_no_gamma_drafts_the_kept_choice_and_says_so():
    """The CLI as shipped: `run` on the bundled pair with no --gamma drafts `gamma: auto`, measured by the first run
    on this machine (or an earlier one) and read back from specviz's cache by the next."""
    args = ("run", "--prompt", "def main():\n", "--max-new-tokens", "16", "--json")
    first = specviz(*args)
    assert first.returncode == 0, first.stderr
    assert len([line for line in first.stderr.splitlines() if line.startswith("on this machine")]) == 1, first.stderr
    second = specviz(*args)
    assert second.returncode == 0, second.stderr
    assert "Choosing γ" not in second.stderr, "measured once per machine and pair"
    (said,) = [line for line in second.stderr.splitlines() if line.startswith("on this machine")]
    assert "kept in" in said and said.endswith("settings.json)")
    ran = json.loads(second.stdout)
    assert ran["engine"] and ran["threads"] >= 1
    label = f"tree {ran['tree']}" if ran["tree"] else f"γ {ran['gamma']}"
    assert said.startswith(f"on this machine: {label},") or said.startswith("on this machine nothing pays"), said


def test_nu_is_the_back_to_back_curve_set_to_what_the_runs_passes_cost_plus_each_cycles_fixed_time():
    passes = {1: 0.010, 2: 0.011, 4: 0.013, 5: 0.016}  # back to back: ν(5) 1.6
    # inside the run the 5-row passes took 0.024 s (the draft's steps between them take the cache): half as dear again
    costs = verify_costs_in_run(passes, rows=(5, 5), pass_s=(0.022, 0.026), fixed_s=0.001, step_s=0.011)
    level = 0.048 / 0.032
    assert costs == pytest.approx({k: (seconds * level + 0.001) / 0.011 for k, seconds in passes.items()})
    assert costs[5] == pytest.approx((0.024 + 0.001) / 0.011), "the choice's own pass, as the run met it"
    as_timed = verify_costs_in_run(passes, rows=(), pass_s=(), fixed_s=0.0, step_s=0.010)
    assert as_timed == pytest.approx({k: seconds / 0.010 for k, seconds in passes.items()}), "no run: the curve as timed"


def test_one_module_answers_what_gamma_auto_chose():
    """Issue 52: γ auto's choosing and keeping live in deployment/gamma_auto.py; the modules it replaced are gone."""
    from pathlib import Path

    package = Path(gamma_auto.__file__).resolve().parent.parent
    for gone in ("deployment/auto_setting.py", "deployment/machine_setting.py", "serving/auto_settings.py"):
        assert not (package / gone).exists(), f"{gone} came back: γ auto has one home, deployment/gamma_auto.py"
    for name in ("choose_setting", "remembered_setting", "kept_setting", "keep_setting", "known", "prepare", "result"):
        assert callable(getattr(gamma_auto, name)), f"gamma_auto.{name}"
