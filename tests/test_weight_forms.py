"""Weight forms of the target: a token's logits must not depend on the rows beside it, so speculation stays exact.

Speculative decoding compares the verify pass (γ + 1 rows in one forward) with what plain decoding would compute
one row at a time. A kernel whose result for a row depends on the other rows (quantize_dynamic's shared activation
scale) breaks that; weight-only kernels compute each row alone. Checked on a tiny Llama here, and on the real
target's own weights in tests/test_real_model.py.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

from specviz.drafting.drafters import FeatureDrafter
from specviz.engine import CachedDecoder, DecodeSettings, Summary, autoregressive_decode, speculative_decode
from specviz.engine.row_exactness import model_rows_independent
from specviz.kernels import forms, w4a8
from specviz.kernels.forms import FORMS
from specviz.kernels.weight_only import Int4WeightOnly, Int8WeightOnly
from specviz.models import row_attention, weight_forms
from specviz.models.feature_head import head_from_target
from specviz.models.weight_forms import apply_form, choose_form
from tests.tiny import fake_vocabulary, tiny_llama

VOCAB = 64
PROMPT = [3, 17, 5, 42, 8, 8, 9]


def formed(form: str):
    model = tiny_llama(VOCAB, seed=0, hidden=64)  # int4 groups of 32 need widths that 32 divides
    return apply_form(model, form)


def logits_alone_and_together(model, prefix: list[int], tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's logits fed one at a time after the prefix, and all of them in one pass (a verify pass)."""
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=torch.tensor([prefix]), cache=cache, use_cache=True)
        together = model(input_ids=torch.tensor([tokens]), cache=cache, use_cache=True, logits_to_keep=len(tokens)).logits[0]
        cache.crop(-len(tokens))
        alone = [model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1] for t in tokens]
    return torch.stack(alone).float(), together.float()


EXACT_FORMS = [name for name, form in FORMS.items() if form.rows_independent]  # w4a8 included: it runs on AVX2 too


@pytest.mark.parametrize("form", EXACT_FORMS)
def test_weight_only_rows_are_independent(form):
    alone, together = logits_alone_and_together(formed(form), PROMPT, [11, 12, 13, 14, 15])
    assert torch.equal(alone, together), (
        f"{form}: a token's logits changed with the rows beside it (max |Δ| {(alone - together).abs().max():.3g}); "
        "greedy speculation would not be exact in this form"
    )


def on_q4_1_grid(model):
    """Weights as a Q4_1 file stores them (the real target's source): per group of 32 inputs, d · q + m, q in 0…15."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                groups = module.weight.view(module.out_features, -1, 32)
                low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
                step = (high - low) / 15
                module.weight.copy_((torch.round((groups - low) / step) * step + low).view_as(module.weight))
    return model


@pytest.mark.parametrize("form,tolerance", [("int8", 0.1), ("int4", 0.02)])
def test_weight_only_forms_stay_close_to_the_model(form, tolerance):
    """int8 per channel stays near any model; int4 in groups of 32 reproduces a Q4_1-sourced model almost exactly."""
    reference = on_q4_1_grid(tiny_llama(VOCAB, seed=0, hidden=64))
    expected_model = on_q4_1_grid(tiny_llama(VOCAB, seed=0, hidden=64)).to(torch.bfloat16)
    with torch.inference_mode():
        expected = expected_model(torch.tensor([PROMPT])).logits.float()
        got = apply_form(reference, form)(torch.tensor([PROMPT])).logits.float()
    drift = (got - expected).abs().mean().item() / expected.std().item()
    assert drift < tolerance, f"{form} drifted {drift:.3f} logit spreads from the bf16 model (allowed {tolerance})"


@pytest.mark.parametrize("form", EXACT_FORMS)
def test_greedy_speculation_equals_plain_decoding_in_the_form(form):
    model = tiny_llama(VOCAB, seed=0, hidden=64)
    head = head_from_target(model, list(range(VOCAB))).to(torch.bfloat16).eval()  # from the unquantised layer
    apply_form(model, form)
    settings = DecodeSettings(max_new_tokens=30, gamma=4)
    drafter = FeatureDrafter(head, VOCAB)
    speculative = list(speculative_decode(CachedDecoder(model, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))[-1]
    plain = list(autoregressive_decode(CachedDecoder(model, VOCAB), PROMPT, settings, fake_vocabulary()))[-1]
    assert isinstance(speculative, Summary)
    assert speculative.new_token_ids == plain.new_token_ids, f"{form}: speculative greedy parted from plain greedy"


def test_forms_are_named_and_chosen_per_machine(monkeypatch):
    with pytest.raises(ValueError, match="unknown weight form"):
        apply_form(tiny_llama(VOCAB), "int3")
    assert set(FORMS) == {"bf16", "int8", "int4", "w4a8", "fp32", "fp32rows"}
    assert choose_form("vnni4", torch.device("cpu")) == "w4a8", "the form's old name still reads"
    assert choose_form(None, torch.device("cpu")) is None
    assert choose_form("auto", torch.device("cuda")) is None, "a GPU keeps the pair's dtype"
    assert choose_form("int4", torch.device("cpu")) == "int4"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert choose_form("auto", torch.device("cpu")) != "bf16", "without a bf16 matrix kernel, auto must not pick bf16"


def test_a_form_names_its_attention_to_transformers_when_applied_not_at_import(monkeypatch):
    """A weight-only model attends with the fast path's attention (models/row_attention.py) on any CPU; it is named to
    transformers the first time a form asks for it, never by importing specviz."""
    code = (
        "from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS\n"
        "import specviz.models.weight_forms, specviz.engine\n"
        "assert 'specviz_row_exact' not in ALL_ATTENTION_FUNCTIONS, 'registered at import'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parent.parent)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert formed("int4").config._attn_implementation == row_attention.ROW_EXACT


def test_a_quantised_weights_file_pages_are_released_and_anonymous_memory_is_never_touched(tmp_path):
    """release_file_pages drops a weight's pages of its mapped file (a later read fetches them again, same values)
    and leaves a tensor in ordinary memory exactly as it was."""
    values = torch.arange(1 << 20, dtype=torch.float32)
    path = tmp_path / "weights.bin"
    values.numpy().tofile(path)
    mapped = torch.from_file(str(path), shared=False, size=values.numel(), dtype=torch.float32)
    assert weight_forms.file_backed(mapped.data_ptr(), mapped.data_ptr() + 4 * mapped.numel())
    mapped.sum()  # every page read in

    def resident_mb() -> float:
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

    before = resident_mb()
    weight_forms.release_file_pages(mapped)
    assert resident_mb() < before - 2, "the file's pages leave this process's memory"
    assert torch.equal(mapped, values), "a released page is read from the file again"
    anonymous = values.clone()
    assert not weight_forms.file_backed(anonymous.data_ptr(), anonymous.data_ptr() + 4 * anonymous.numel())
    weight_forms.release_file_pages(anonymous)
    assert torch.equal(anonymous, values), "memory that is not a file's must never be dropped"


def test_a_linear_bias_survives_every_weight_only_form():
    """Qwen2's q, k and v have biases: a form that dropped them would change the model, not just round it."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 64, bias=True).to(torch.bfloat16)
    torch.nn.init.normal_(linear.bias, std=4.0)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    for make in (Int8WeightOnly, Int4WeightOnly, w4a8.W4A8Linear):
        quantised = make(linear)
        assert torch.allclose(quantised(x).float(), linear(x).float(), atol=0.5), f"{make.__name__} lost the bias"


def test_a_run_says_whether_its_target_is_exact_to_the_bit_or_up_to_rounding():
    """A float target's GEMMs pick kernels by the rows' count (weight_forms.py: fp32 and bf16 differ in the last bits
    between one row and five), so its runs say 'exact up to rounding'; a weight-only one is exact to the bit."""
    for form, exact in (("int8", True), ("int4", True), ("w4a8", True), ("bf16", False), ("fp32", False)):
        model = formed(form)
        assert model_rows_independent(model, "transformers") is exact, form
        started = next(
            iter(autoregressive_decode(CachedDecoder(model, VOCAB), PROMPT, DecodeSettings(max_new_tokens=2), fake_vocabulary()))
        )
        assert started.rows_exact is exact, form
    partly = formed("int8")
    partly.lm_head = torch.nn.Linear(64, VOCAB, bias=False).to(torch.bfloat16)  # one layer the form did not take
    assert not model_rows_independent(partly, "compiled")
    eager_attention = formed("int8")
    eager_attention.set_attn_implementation("eager")
    assert not model_rows_independent(eager_attention, "transformers")
    assert model_rows_independent(eager_attention, "eager"), "the fast path attends with its own attention"


def test_a_pairs_head_weights_choose_the_heads_form_beside_a_weight_only_target(monkeypatch):
    from specviz.models.weight_forms import HEAD_FORM, head_form_beside

    assert head_form_beside(None, "w4a8") is None and head_form_beside("bf16", "int4") is None, "plain targets: as trained"
    assert head_form_beside("w4a8") == HEAD_FORM and head_form_beside("int4", "int4") == "int4"
    monkeypatch.setattr(w4a8, "why_not", lambda: None)
    assert head_form_beside("w4a8", "w4a8") == "w4a8" and head_form_beside("int4", "vnni4") == "w4a8"
    monkeypatch.setattr(w4a8, "why_not", lambda: "no kernel here")  # a CPU the kernel cannot run on: int8 drafts
    assert head_form_beside("int4", "w4a8") == HEAD_FORM


def stray_form_lists() -> list[str]:
    """Every tuple, list or set literal in specviz/ outside the registry that names two weight forms or more."""
    import ast

    names = set(FORMS) | set(forms.ALIASES)
    package = Path(__file__).resolve().parents[1] / "specviz"
    found = []
    for path in package.rglob("*.py"):
        if path.name == "forms.py" and path.parent.name == "kernels":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                named = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
                if len(named) >= 2:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {named}")
    return found


def test_which_forms_exist_is_answered_by_the_registry_alone():
    """kernels/forms.py is the one list of weight forms: a menu, a schema or a check that lists form names itself
    would drift from it (the form once called vnni4 was listed in six places)."""
    assert stray_form_lists() == [], "lists of weight forms outside specviz/kernels/forms.py"
    assert forms.packed_names() == ("int8", "int4", "w4a8") and forms.get("vnni4") is FORMS["w4a8"]
    assert [name for name in FORMS if forms.rows_independent(name)] == ["int8", "int4", "w4a8"]
