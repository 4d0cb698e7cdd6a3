"""The vnni4 weight form (models/vnni4.py): int4 weights × per-row int8 activations. What keeps speculation exact in it is
that a row's output does not depend on the rows beside it; checked here bit for bit, through the fused projections, on
the fast path eager and compiled, and by greedy speculation against plain decoding. The kernel exists only where the
CPU has AVX-512 VNNI (it cannot be forced elsewhere): there these tests skip, and `auto` picks int4 (tested too)."""

import pytest
import torch
from torch import nn

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, DecodeSettings, autoregressive_decode, speculative_decode
from specviz.engine.compiled import FastDecoder, FastModel
from specviz.engine.fused_projections import FusedProjections, fuse
from specviz.models import vnni4
from specviz.models.weight_forms import apply_form, choose_form
from tests.tiny import fake_vocabulary, pass_and_steps, tiny_llama

needs_vnni = pytest.mark.skipif(not vnni4.cpu_has_vnni(), reason="this CPU has no AVX-512 VNNI: the vnni4 kernel cannot run")
VOCAB = 64
PROMPT = [3, 14, 15, 9, 26, 5, 35]


def test_auto_takes_vnni4_only_where_it_runs(monkeypatch):
    chosen = choose_form("auto", torch.device("cpu"))
    assert chosen == ("vnni4" if vnni4.available() else "int4")
    monkeypatch.setattr(vnni4, "available", lambda: False)
    assert choose_form("auto", torch.device("cpu")) == "int4", "without the kernel, auto falls back to int4"


@needs_vnni
def test_a_rows_output_is_the_same_alone_and_beside_others():
    torch.manual_seed(0)
    linear = nn.Linear(256, 192, bias=True)
    nn.init.normal_(linear.bias, std=2.0)
    layer = vnni4.Vnni4WeightOnly(linear)
    x = torch.randn(12, 256, dtype=torch.bfloat16)
    x[3, 7] = 40.0  # an outlier channel in one row changes that row's activation scale, and no other row's
    alone = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
    for rows in (2, 5, 8, 12):
        together = layer(x[:rows])
        assert torch.equal(together, alone[:rows]), f"a row's output changed inside a {rows}-row product"
    reference = linear(x.float())
    assert (layer(x).float() - reference).abs().max() < 0.5, "the form approximates the bf16 product closely"


@needs_vnni
def test_fused_projections_are_the_separate_calls_bit_for_bit():
    torch.manual_seed(1)
    parts = [vnni4.Vnni4WeightOnly(nn.Linear(128, width, bias=True)) for width in (128, 64, 64)]
    x = torch.randn(5, 128, dtype=torch.bfloat16)
    separate = torch.cat([part(x) for part in parts], dim=-1)
    fused = fuse(parts)
    assert isinstance(fused, FusedProjections)
    assert torch.equal(fused(x), separate)


def vnni4_llama(seed: int = 0):
    model = tiny_llama(VOCAB, seed=seed, hidden=64)  # 32 divides every width
    return apply_form(model, "vnni4")


@needs_vnni
def test_the_fast_path_keeps_rows_independent_and_matches_transformers_in_the_form():
    model = vnni4_llama()
    reference, fast = CachedDecoder(model, VOCAB), FastDecoder(FastModel(model, compile_step=False), VOCAB)
    torch.testing.assert_close(
        fast.feed(PROMPT, keep_last=len(PROMPT)), reference.feed(PROMPT, keep_last=len(PROMPT)), rtol=0, atol=0.05
    )
    together, alone = pass_and_steps(fast, [1, 2, 3, 4, 5])
    assert torch.equal(together, alone)


@needs_vnni
@pytest.mark.parametrize("decoder", ["transformers", "fast path"])
def test_greedy_speculation_equals_plain_decoding_in_vnni4(decoder):
    target, draft = vnni4_llama(seed=0), tiny_llama(VOCAB, seed=3, hidden=32)
    make = (
        (lambda m: CachedDecoder(m, VOCAB))
        if decoder == "transformers"
        else (lambda m: FastDecoder(FastModel(m, compile_step=False), VOCAB))
    )
    settings = DecodeSettings(max_new_tokens=24, gamma=4)
    vocabulary = fake_vocabulary(VOCAB)
    plain = list(autoregressive_decode(make(target), PROMPT, settings, vocabulary))[-1].new_token_ids
    speculative = list(speculative_decode(make(target), ModelDrafter(make(draft)), PROMPT, settings, vocabulary))[
        -1
    ].new_token_ids
    assert speculative == plain


@pytest.mark.slow
@needs_vnni
def test_the_compiled_step_in_vnni4_is_eager_to_the_bit_and_keeps_rows_independent(tmp_path, monkeypatch):
    from specviz.engine.compiled import enable, use_inductor_cache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    use_inductor_cache(str(tmp_path))
    model = vnni4_llama()
    eager = FastDecoder(FastModel(model, compile_step=False), VOCAB).feed(PROMPT, keep_last=len(PROMPT))
    fast = enable(model, compile_step=True)
    assert fast.warm_up().compiled and fast.package is not None
    compiled = FastDecoder(fast, VOCAB)
    assert torch.equal(compiled.feed(PROMPT, keep_last=len(PROMPT)), eager)
    start = compiled.cached_length
    together = compiled.feed([1, 2, 3, 4, 5], keep_last=5)
    compiled.truncate(start)
    assert torch.equal(together, torch.cat([compiled.feed([token]) for token in [1, 2, 3, 4, 5]]))
