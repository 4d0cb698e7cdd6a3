"""The w4a8 weight form (kernels/w4a8.py): 4-bit weights × 8-bit activations, integer dot products. What keeps
speculation exact in it is that a row's output does not depend on the rows beside it, and that the kernel's AVX-512
VNNI and AVX2 paths compute the same bits: both are built here wherever the CPU has them (the AVX2 path on every x86
CPU of the last decade, AVX-512 machines included), compared bit for bit against each other and against an exact
reference of the form's arithmetic, then run through the fused projections, the fast path eager and compiled, and
greedy speculation against plain decoding. `auto` takes the form by timing it (kernels/choice.py), tested too."""

import time

import pytest
import torch
from torch import nn

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, DecodeSettings, autoregressive_decode, speculative_decode
from specviz.engine.compiled import FastDecoder, FastModel
from specviz.kernels import build, choice, cpu, forms, w4a8
from specviz.models.weight_forms import apply_form
from tests.tiny import fake_vocabulary, pass_and_steps, tiny_llama

VOCAB = 64
PROMPT = [3, 14, 15, 9, 26, 5, 35]
PATHS = [path for path, needs in (("avx512", cpu.AVX512_PATH), ("avx2", cpu.AVX2_PATH)) if needs <= cpu.flags()]
needs_kernel = pytest.mark.skipif(not w4a8.available(), reason=f"the w4a8 kernel cannot run here: {w4a8.why_not()}")


def path_ops(path: str):
    """The op library of one path of the kernel, built (once per machine) and loaded beside the process's own."""
    build.load_library(w4a8.library(path), w4a8.SOURCE, w4a8.flags(path), f"the 4-bit kernel ({path} path)")
    return getattr(torch.ops, w4a8.library(path))


def exact_reference(x: torch.Tensor, codes, scales, zeros, bias) -> torch.Tensor:
    """The form's arithmetic in float64: each row's groups of 32 quantised symmetrically to int8, times the weights'
    (code − zero) · scale, summed."""
    rows, n_in = x.shape
    groups = x.double().view(rows, n_in // 32, 32)
    step = groups.abs().amax(-1, keepdim=True) / 127
    activations = torch.where(step > 0, torch.round(groups / step.clamp(min=1e-30)), 0.0).clamp(-127, 127) * step
    weights = (codes.double().view(len(codes), -1, 32) - zeros.double()[..., None]) * scales.double()[..., None]
    return torch.einsum("rgk,ngk->rn", activations, weights) + bias.double()


@pytest.mark.skipif(not PATHS, reason="this CPU has neither AVX-512 VNNI nor AVX2")
def test_every_path_computes_the_same_bits_row_by_row_and_the_forms_arithmetic():
    torch.manual_seed(0)
    for n_in, n_out in ((256, 192), (1536, 256)):
        linear = nn.Linear(n_in, n_out, bias=True)
        nn.init.normal_(linear.bias, std=2.0)
        codes, scales, zeros = w4a8.quantise(linear.weight)
        x = torch.randn(13, n_in, dtype=torch.bfloat16)
        x[3, 7] = 40.0  # an outlier in one row changes that row's group scale, and no other row's
        x[5, :32] = 0.0  # a group of zeros: scale 0, every product 0
        bias = linear.bias.detach().float()
        outputs = {}
        for path in PATHS:
            ops = path_ops(path)
            packed = ops.w4a8_prepack(codes, scales, zeros)
            out = ops.w4a8_linear(x, *packed, bias)
            alone = torch.cat([ops.w4a8_linear(x[i : i + 1], *packed, bias) for i in range(len(x))])
            for rows in (2, 3, 5, 8, 9, 13):
                assert torch.equal(ops.w4a8_linear(x[:rows], *packed, bias), alone[:rows]), f"{path}: a row changed in {rows}"
            reference = exact_reference(x, codes, scales, zeros, bias)
            assert (out.double() - reference).abs().max() <= 2**-7 * reference.abs().max(), f"{path}: not the form's sums"
            outputs[path] = out
        first = next(iter(outputs.values()))
        assert all(torch.equal(first, out) for out in outputs.values()), f"the paths {PATHS} differ"


@pytest.mark.skipif(not PATHS, reason="this CPU has neither AVX-512 VNNI nor AVX2")
def test_every_path_quantises_activations_to_the_nearest_even_code():
    """A group whose largest |x| is 127 has scale 1, so its int8 codes are x rounded, halves to even; an identity
    weight reads each code back alone: y[n] = (15 · code[n]) · 1 · s_w[n], which pins the quantiser's rounding, clamp
    and order on every path (its zero points are 0, so the group sums are left to the reference test above)."""
    halves = [127.0, 2.5, 3.5, -2.5, -3.5, 0.5, 1.5, -0.5, -1.5, 100.5, -126.5, 0.0]
    x = torch.zeros(2, 32, dtype=torch.bfloat16)  # row 1 stays zero: scale 0, every product 0
    x[0, : len(halves)] = torch.tensor(halves)
    x[0, len(halves) :] = torch.linspace(-60, 60, 32 - len(halves))
    codes, scales, zeros = w4a8.quantise(torch.eye(32))
    assert zeros.eq(0).all() and codes.diagonal().eq(15).all()
    rounded = torch.round(x[0].float())  # torch.round: half to even
    expected = ((15 * rounded) * 1.0 * scales[:, 0].float()).to(torch.bfloat16)
    for path in PATHS:
        ops = path_ops(path)
        out = ops.w4a8_linear(x, *ops.w4a8_prepack(codes, scales, zeros), None)
        assert torch.equal(out[0], expected), f"{path}: {out[0][:12].tolist()} against {expected[:12].tolist()}"
        assert out[1].eq(0).all(), f"{path}: a zero row is not zero"


@needs_kernel
def test_fused_projections_are_the_separate_calls_bit_for_bit():
    torch.manual_seed(1)
    parts = [w4a8.W4A8Linear(nn.Linear(128, width, bias=True)) for width in (128, 64, 64)]
    x = torch.randn(5, 128, dtype=torch.bfloat16)
    separate = torch.cat([part(x) for part in parts], dim=-1)
    fused = forms.concatenated(parts)
    assert isinstance(fused, w4a8.W4A8Linear) and fused.out_features == 256
    assert torch.equal(fused(x), separate)


def w4a8_llama(seed: int = 0):
    model = tiny_llama(VOCAB, seed=seed, hidden=64)  # 32 divides every width
    return apply_form(model, "w4a8")


@needs_kernel
def test_the_fast_path_keeps_rows_independent_and_matches_transformers_in_the_form():
    model = w4a8_llama()
    reference, fast = CachedDecoder(model, VOCAB), FastDecoder(FastModel(model, compile_step=False), VOCAB)
    torch.testing.assert_close(
        fast.feed(PROMPT, keep_last=len(PROMPT)), reference.feed(PROMPT, keep_last=len(PROMPT)), rtol=0, atol=0.05
    )
    together, alone = pass_and_steps(fast, [1, 2, 3, 4, 5])
    assert torch.equal(together, alone)


@needs_kernel
@pytest.mark.parametrize("decoder", ["transformers", "fast path"])
def test_greedy_speculation_equals_plain_decoding_in_w4a8(decoder):
    target, draft = w4a8_llama(seed=0), tiny_llama(VOCAB, seed=3, hidden=32)
    make = (
        (lambda m: CachedDecoder(m, VOCAB))
        if decoder == "transformers"
        else (lambda m: FastDecoder(FastModel(m, compile_step=False), VOCAB))
    )
    settings = DecodeSettings(max_new_tokens=24, gamma=4)
    vocabulary = fake_vocabulary(VOCAB)
    plain = list(autoregressive_decode(make(target), PROMPT, settings, vocabulary))[-1].new_token_ids
    speculative = list(speculative_decode(make(target), ModelDrafter(make(draft)), PROMPT, settings, vocabulary))
    assert speculative[-1].new_token_ids == plain


def test_the_kernel_path_follows_the_cpu_and_the_switch(monkeypatch):
    monkeypatch.setattr(cpu, "flags", lambda: frozenset(cpu.AVX512_PATH | cpu.AVX2_PATH))
    monkeypatch.delenv(cpu.PATH_SWITCH, raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    assert cpu.kernel_path()[0] == "avx512"
    monkeypatch.setenv(cpu.PATH_SWITCH, "avx2")
    assert cpu.kernel_path() == ("avx2", "$SPECVIZ_KERNEL_ISA=avx2 forces it")
    monkeypatch.delenv(cpu.PATH_SWITCH)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert cpu.kernel_path()[0] == "avx2", "torch told to run AVX2 kernels: ours take their AVX2 path too"
    monkeypatch.setattr(cpu, "flags", lambda: frozenset({"sse4_2"}))
    path, why = cpu.kernel_path()
    assert path is None and "neither" in why


def test_without_a_compiler_the_form_says_what_to_install(monkeypatch):
    monkeypatch.setattr(build, "cxx_compiler", lambda: None)
    with pytest.raises(RuntimeError, match="apt-get install g\\+\\+"):
        build.load_library("specviz_never_built", w4a8.SOURCE, [], "a kernel")


def test_auto_times_the_exact_forms_on_the_models_shapes_once_per_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(choice, "choices_file", lambda: tmp_path / "form_choices.json")
    model = tiny_llama(VOCAB, seed=0, hidden=64)
    shapes, layers = choice.layer_shapes(model)
    assert (64, 64) in shapes and layers == model.config.num_hidden_layers
    first = choice.fastest_exact(model)
    assert first.form in choice.candidates() and first.form in first.reason
    assert set(first.step_s) == set(choice.candidates()), "every exact form this CPU runs was timed"
    monkeypatch.setattr(choice, "measure", lambda *args: pytest.fail("measured twice on the same machine and shapes"))
    assert choice.fastest_exact(model) == first
    formed = apply_form(tiny_llama(VOCAB, seed=0, hidden=64), "auto")
    assert formed.weight_form == first.form and first.reason in formed.weight_kernel


def test_a_form_timed_beside_other_work_is_timed_again_later(tmp_path, monkeypatch):
    from specviz.process.machine_load import OtherLoad

    class Busy:  # process/machine_load.LoadMeter as it reads a machine where another program took a core
        result = OtherLoad(other_cores=1.0)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(choice, "choices_file", lambda: tmp_path / "form_choices.json")
    monkeypatch.setattr(choice, "LoadMeter", Busy)
    model = tiny_llama(VOCAB, seed=0, hidden=64)
    timed = []
    monkeypatch.setattr(choice, "measure", lambda *args: timed.append(1) or choice.FormChoice("int8", "int8 was fastest", {}, {}))
    if len(choice.candidates(model)) < 2:
        pytest.skip("one exact form only: nothing is timed")
    first = choice.fastest_exact(model)
    assert choice.fastest_exact(model) == first and len(timed) == 1, "the loads soon after reuse it"
    later = time.time() + choice.BUSY_KEPT_S + 1
    monkeypatch.setattr(choice.time, "time", lambda: later)
    choice.fastest_exact(model)
    assert len(timed) == 2, "then it is timed again"


@pytest.mark.slow
@needs_kernel
def test_the_compiled_step_in_w4a8_is_eager_to_the_bit_and_keeps_rows_independent(tmp_path, monkeypatch):
    from specviz.engine.compiled import enable, use_inductor_cache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    use_inductor_cache(str(tmp_path))
    model = w4a8_llama()
    eager = FastDecoder(FastModel(model, compile_step=False), VOCAB).feed(PROMPT, keep_last=len(PROMPT))
    fast = enable(model, compile_step=True)
    assert fast.warm_up().compiled and fast.package is not None
    compiled = FastDecoder(fast, VOCAB)
    assert torch.equal(compiled.feed(PROMPT, keep_last=len(PROMPT)), eager)
    start = compiled.cached_length
    together = compiled.feed([1, 2, 3, 4, 5], keep_last=5)
    compiled.truncate(start)
    assert torch.equal(together, torch.cat([compiled.feed([token]) for token in [1, 2, 3, 4, 5]]))
