"""A token's logits do not depend on the rows beside it, on every path a pair runs and every CPU kernel set (issue 43).

Speculation is exact only if a verify pass computes each of its rows as a one-token step would. Issue 43 found it
broken on an Intel Xeon with AMX, in transformers' forward only: there its eager attention's bf16 products went to
oneDNN, which sends a one-row product to its AVX-512-BF16 kernel and a 5-row one to AMX tiles (its brgemm matmul's
"small shapes" rule), and the two round differently; the weight-only layers (torch's int4/int8 micro-kernels, one
accumulator a row, no oneDNN) and the fast path's attention (float32 sums) held. Weight-only models now attend with
the fast path's attention in transformers' forward too (models/row_attention.py).

The checks are tests/row_kernels.py's, run in a child process whose kernels are chosen before torch loads:

- quick suite: this CPU's own kernels (none forced), on transformers' forward and the fast path eager;
- `-m slow`: every kernel set this CPU offers, forced in turn, with the compiled package too: `avx2`
  (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2: an AVX2 machine, where torch takes no oneDNN kernel for bf16),
  `avx512` (AVX512_CORE: Skylake and Cascade Lake, whose oneDNN bf16 GEMM blocks by rows), `avx512-bf16`
  (AVX512_CORE_BF16: Cooper Lake, Zen 4) and `amx` (AVX512_CORE_AMX: Sapphire Rapids on), each where the CPU has it.

A CPU without AMX cannot run AMX's kernels: oneDNN caps the ISA it is told at what the CPU has (the report names the
ISA oneDNN ran). What AMX changes is covered anyway: the exact forms' forwards start no oneDNN primitive and make no
MKL call (counted under both libraries' verbose logs), so no kernel oneDNN or MKL picks, AMX's included, reaches a
row; and the row counts (1 to 33) cross every switch the kernels make by rows (int4/int8: 1–4 rows a micro-kernel;
w4a8: 8 a call on AVX-512, 2 on AVX2; oneDNN with AMX: one row against more). On an AVX-512 CPU the `avx512` set also shows that the check
can fail: there transformers' eager attention, on the same inputs, gives a row other bits beside others.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specviz.analysis.kernels import offered_kernel_sets
from specviz.kernels.forms import FORMS as REGISTRY
from specviz.kernels.forms import rows_independent
from specviz.models import row_attention
from specviz.models.weight_forms import apply_form
from tests.row_kernels import PROMPT, TREE, VOCAB
from tests.tiny import grouped_llama

ROOT = Path(__file__).resolve().parent.parent
# every exact form (w4a8 on the kernel path the kernel set implies: its AVX2 path under `avx2`), and bf16 reported
FORMS = (*(name for name, form in REGISTRY.items() if form.rows_independent), "bf16")
OWN = "this CPU's own"


_results: dict[tuple[str, bool], dict] = {}


def checked(kernel_set: str, compiled: bool, tmp_path_factory) -> dict:
    """tests/row_kernels.py's results under `kernel_set`, run once per session."""
    if (kernel_set, compiled) not in _results:
        out = tmp_path_factory.mktemp("rows") / "results.json"
        forced = {} if kernel_set == OWN else offered_kernel_sets()[kernel_set]
        env = {key: value for key, value in os.environ.items() if key not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
        env.update(forced, MKL_VERBOSE="1", PYTHONPATH=str(ROOT))
        command = [sys.executable, "-m", "tests.row_kernels", str(out), *FORMS, *(["--compiled"] if compiled else [])]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, f"the checks failed to run under {kernel_set}: {done.stderr[-3000:]}"
        _results[kernel_set, compiled] = json.loads(out.read_text())
    return _results[kernel_set, compiled]


def held_to_the_bit(results: dict, kernel_set: str) -> None:
    """Every check of one kernel set: 0.0 is bit-identical."""
    where = f"{kernel_set} kernels (torch {results['capability']}, oneDNN {results['onednn_isa']})"
    attention = results["attention"]
    assert attention["row_exact"] == 0.0, f"{where}: a row's attention changed beside others by {attention['row_exact']:.3g}"
    assert attention["row_exact_tree"] == 0.0, (
        f"{where}: a tree node's attention is not its path's: {attention['row_exact_tree']:.3g}"
    )
    for form in results["forms"]:
        assert results["linear"][form] == 0.0, (
            f"{where}: a {form} layer's row changed beside others by {results['linear'][form]:.3g}"
        )
        for decoder, found in results["model"][form].items():
            on = f"{where}, {form} on {decoder}"
            assert found["chain"] == 0.0, f"{on}: a verify pass's row differs from its one-token step by {found['chain']:.3g}"
            assert found["tree"] == 0.0, f"{on}: a tree node differs from its path's steps by {found['tree']:.3g}"
            parted = [method for method, same in found["identical"].items() if not same]
            assert not parted, f"{on}: greedy speculation parted from plain decoding with {parted}"
            drafted = {method: n for method, n in found["accepted"].items() if "feature" not in method}
            assert all(drafted.values()), f"{on}: no draft was accepted ({drafted}), so the identity proved little"
        libraries = results["libraries"][form]
        assert libraries == {"onednn": 0, "mkl": 0}, (
            f"{where}, {form}: its forward reached a library that picks kernels by the rows' count: {libraries}"
        )


def test_every_row_is_its_one_token_step_on_this_cpus_own_kernels(tmp_path_factory):
    """Quick: transformers' forward and the fast path (eager), int8, int4 and w4a8, on the kernels torch picks here."""
    results = checked(OWN, False, tmp_path_factory)
    assert set(results["forms"]) >= {"int8", "int4"}
    assert "w4a8" in results["forms"] or results["w4a8_path"] is None, "the w4a8 kernel runs here but was not checked"
    held_to_the_bit(results, OWN)


@pytest.mark.slow
@pytest.mark.parametrize("kernel_set", list(offered_kernel_sets()) or ["none"])
def test_every_row_is_its_one_token_step_on_every_kernel_set_this_cpu_offers(kernel_set, tmp_path_factory):
    """Slow: each kernel set forced in turn, the compiled package included (compiled once per set, then cached)."""
    assert kernel_set != "none", "this CPU offers none of the kernel sets (it has no AVX2)"
    results = checked(kernel_set, True, tmp_path_factory)
    assert all("compiled" in results["model"][form] for form in results["forms"]), "the compiled package was not checked"
    if kernel_set == "avx2":  # the kernel's AVX2 path, forced on any x86 machine: never skipped
        assert "w4a8" in results["forms"] and results["w4a8_path"] == "avx2", results.get("w4a8_path")
    held_to_the_bit(results, kernel_set)
    if kernel_set == "avx512":  # oneDNN's jit bf16 GEMM: where the old attention's rows depended on each other
        assert results["attention"]["eager"] > 0, (
            "transformers' eager attention kept rows bit-identical under oneDNN's AVX512_CORE kernels: the check "
            "would not catch issue 43's fault here"
        )


# -- the attention itself: what eager attention computes, row by row ---------------------------------------------


@pytest.mark.parametrize("form", ["float32", "int8"])
def test_the_row_exact_attention_computes_eager_attention(form):
    """Not just consistent: the same numbers as transformers' eager attention, to float32 rounding in float32 and to
    bf16 rounding in a weight-only form, after a prefill, steps and a verify pass."""
    model = grouped_llama(seed=0)
    if form != "float32":
        apply_form(model, form)
    tokens = PROMPT + [11, 12, 13, 14, 15]
    with torch.inference_mode():
        model.set_attn_implementation(row_attention.row_exact())
        got = model(input_ids=torch.tensor([tokens])).logits.float()
        model.set_attn_implementation("eager")
        expected = model(input_ids=torch.tensor([tokens])).logits.float()
    tolerance = 1e-4 if form == "float32" else 0.1
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=0)


def test_a_padded_batch_attends_as_eager_does():
    """Left-padded rows (distill answers prompts in padded batches): the padding stays unseen, as with eager."""
    model = grouped_llama(seed=0)
    input_ids = torch.tensor([[0, 0, 0, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8]])
    attention_mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]])
    with torch.inference_mode():
        model.set_attn_implementation(row_attention.row_exact())
        got = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
        model.set_attn_implementation("eager")
        expected = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
    torch.testing.assert_close(got[:, 3:], expected[:, 3:], atol=1e-4, rtol=0)


def test_a_tree_node_attends_to_its_context_and_ancestors_only():
    """transformers' tree forward (CachedDecoder.forward_tree) with the row-exact attention, against eager's: the
    same mask, so the same logits to float32 rounding (engine/tree.py)."""
    from specviz.engine import CachedDecoder
    from specviz.engine.tree import verify_tree

    model = grouped_llama(seed=0)
    results = []
    for attention in (row_attention.row_exact(), "eager"):
        model.set_attn_implementation(attention)
        decoder = CachedDecoder(model, VOCAB)
        decoder.feed(PROMPT[:-1])
        results.append(verify_tree(decoder, PROMPT, TREE)[0])
    torch.testing.assert_close(results[0], results[1], atol=1e-4, rtol=0)


def test_attention_this_function_does_not_compute_keeps_eager():
    """Gemma 2 soft-caps its scores and gpt-oss adds sinks: those models keep eager attention in a weight form, and
    the function refuses to run in their place rather than compute something else."""
    model = grouped_llama(seed=0)
    assert row_attention.fits(model)
    model.config.attn_logit_softcapping = 50.0
    assert not row_attention.fits(model)
    assert apply_form(model, "int8").config._attn_implementation == "eager"
    query, key = torch.zeros(1, 4, 1, 32), torch.zeros(1, 2, 3, 32)
    with pytest.raises(ValueError, match="softcap"):
        row_attention.row_exact_attention(None, query, key, key, None, 1.0, softcap=30.0)


def test_which_forms_are_exact():
    assert [name for name, form in REGISTRY.items() if form.rows_independent] == ["int8", "int4", "w4a8"]
    assert rows_independent("int4") and not rows_independent("bf16") and not rows_independent(None)


def test_gpt2s_conv1d_projections_take_the_form():
    """GPT-2 stores its projections as Conv1D (y = x·W + b, W as (in, out)): they become weight-only layers computing
    the same product, so a GPT-2 target is row-exact too (tests/row_kernels.py checks its rows and greedy identity)."""
    from tests.row_kernels import gpt2

    model = gpt2(seed=0)
    tokens = torch.tensor([PROMPT])
    with torch.inference_mode():
        expected = model(input_ids=tokens).logits.float()
        apply_form(model, "int8")
        got = model(input_ids=tokens).logits.float()
    kinds = {type(module).__name__ for module in model.modules()}
    assert "Conv1D" not in kinds and "Int8WeightOnly" in kinds, f"GPT-2's projections kept their float form: {kinds}"
    drift = (got - expected).abs().mean().item() / expected.std().item()
    assert drift < 0.1, f"the int8 GPT-2 drifted {drift:.3f} logit spreads from the float model"
