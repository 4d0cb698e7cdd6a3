"""The fast path (static KV cache, compiled step) against transformers' own forward, cache and generate().

The static-cache forward must give every token the logits transformers' dynamic cache gives it (to float32 rounding:
the tiny models here attend through torch's fused SDPA, ours through plain products; in a weight form, transformers'
forward attends with the fast path's own attention, models/row_attention.py), after any sequence of
steps, verify passes and rollbacks; greedy decoding on it must equal generate(); speculation on it must equal plain
decoding on it. The quick tests run the static-cache forward eager; the one compiled test is marked slow (compiling
takes a minute on 2 cores, seconds once Inductor's cache holds it).
"""

from types import SimpleNamespace

import pytest
import torch

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, DecodeSettings, autoregressive_decode, speculative_decode, static_cache
from specviz.engine.compiled import (
    LONG_ROWS,
    FastDecoder,
    FastModel,
    decode_glue_threads,
    decoder_for,
    enable,
    fast_model,
    load_cached_packages,
    pair_engine,
)
from specviz.engine.static_cache import is_supported
from specviz.kernels import forms
from tests import tiny
from tests.tiny import fake_vocabulary, pass_and_steps, tiny_llama

VOCAB = 64
PROMPT = [3, 14, 15, 9, 26, 5, 35]


def grouped_llama(seed: int = 0):
    """A tiny Llama with grouped key/value heads (4 query heads, 2 key/value heads), as SmolLM2 has (9 and 3)."""
    model = tiny_llama(VOCAB, seed=seed, layers=2)
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**model.config.to_dict(), "num_key_value_heads": 2})
    grouped = LlamaForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in grouped.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5 if parameter.dim() > 1 else parameter)
    return grouped


@pytest.fixture(scope="module")
def target():
    return grouped_llama(seed=0)


def test_static_cache_logits_equal_transformers_after_steps_passes_and_rollbacks(target):
    reference = CachedDecoder(target, VOCAB)
    fast = FastDecoder(FastModel(target, compile_step=False), VOCAB)
    checks = [
        (PROMPT, len(PROMPT)),  # the prefill, every row
        ([7], 1),  # a step
        ([8, 9, 10, 11], 4),  # a verify pass
        ("rollback", 9),
        ([12, 13], 2),
        ([4], 1),
    ]
    for tokens, keep in checks:
        if tokens == "rollback":
            reference.truncate(keep)
            fast.truncate(keep)
            assert fast.cached_length == reference.cached_length == keep
            continue
        expected, got = reference.feed(tokens, keep_last=keep), fast.feed(tokens, keep_last=keep)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-4, msg=lambda m, tokens=tokens: f"after feeding {tokens}: {m}")


def test_an_eager_prefill_in_parts_equals_one_pass(target, monkeypatch):
    """A long eager forward goes through in parts of rows (static_cache.EAGER_PRODUCTS, memory): in a weight-only
    form (rows independent) the same logits and the same cache as one pass, to the bit."""
    model = weight_only(target, "int8")
    whole, parts = (FastDecoder(FastModel(model, compile_step=False), VOCAB) for _ in range(2))
    expected = whole.feed(PROMPT, keep_last=len(PROMPT))
    monkeypatch.setattr(static_cache, "EAGER_PRODUCTS", 1)  # one row a part
    got = parts.feed(PROMPT, keep_last=len(PROMPT))
    assert torch.equal(got, expected)
    assert all(torch.equal(a[:, : len(PROMPT)], b[:, : len(PROMPT)]) for a, b in zip(parts.cache, whole.cache))


def test_hidden_states_are_transformers_own(target):
    reference = CachedDecoder(target, VOCAB)
    fast = FastDecoder(FastModel(target, compile_step=False), VOCAB)
    layers = (-1, 0, 1)  # the final normed state, the embeddings, the first layer's output
    _, expected = reference.feed_with_hidden_states(PROMPT, keep_last=1, hidden_last=len(PROMPT), layers=layers)
    _, got = fast.feed_with_hidden_states(PROMPT, keep_last=1, hidden_last=len(PROMPT), layers=layers)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)


def weight_only(model, form: str = "int8"):
    """A copy of the model in a weight-only form: bf16 activations, rows independent (specviz/models/weight_forms.py)."""
    import copy

    from specviz.models.weight_forms import apply_form

    return apply_form(copy.deepcopy(model), form)


@pytest.mark.parametrize("form", ["int8", "int4"])
def test_a_token_gets_the_same_logits_alone_and_inside_a_verify_pass(target, form):
    """What keeps greedy speculation exact on the fast path: in the weight-only forms the pair runs in, the rows of a
    pass do not depend on each other (float32 GEMMs block by rows, so there identity is to rounding only)."""
    fast = FastDecoder(FastModel(weight_only(target, form), compile_step=False), VOCAB)
    fast.feed(PROMPT)
    together, alone = pass_and_steps(fast, [1, 2, 3, 4, 5])
    assert torch.equal(together, alone), f"max |Δ logit| {(together - alone).abs().max():.2e} between a pass and single steps"


def wide_llama(seed: int = 0):
    """A tiny grouped Llama wide enough for int4 fusion (every projection a multiple of 64 output channels)."""
    return tiny.grouped_llama(seed, vocab=VOCAB)


@pytest.mark.parametrize("form", ["int8", "int4"])
def test_fused_projections_keep_the_logits_of_transformers_bit_for_bit(form):
    """q/k/v and gate/up in one kernel call each (kernels/forms.concatenated): every token's logits stay
    transformers' own eager logits, exactly, through steps, verify passes and rollbacks."""
    model = weight_only(wide_llama(), form)
    fast = FastModel(model, compile_step=False)
    fused = [*fast.forward.qkv, *fast.forward.gate_up]
    assert all(forms.form_of(module).name == form for module in fused), f"{form}: q/k/v and gate/up should fuse"
    reference, decoder = CachedDecoder(model, VOCAB), FastDecoder(fast, VOCAB)
    for tokens in (PROMPT, [7], [8, 9, 10, 11], "rollback", [12, 13], [4]):
        if tokens == "rollback":
            reference.truncate(9)
            decoder.truncate(9)
            continue
        expected, got = reference.feed(tokens, keep_last=len(tokens)), decoder.feed(tokens, keep_last=len(tokens))
        assert torch.equal(got, expected), f"{form}, after {tokens}: max |Δ logit| {(got - expected).abs().max():.2e}"


def test_float_and_misaligned_projections_stay_separate(target):
    """Fusing float linears could round differently (a GEMM may block by output channels), and int4 parts must
    start on the packing's 64-channel blocks: those keep one call each."""
    attention = target.model.layers[0].self_attn
    assert forms.concatenated([attention.q_proj, attention.k_proj, attention.v_proj]) is None  # float32
    narrow = weight_only(target, "int4").model.layers[0].self_attn  # k and v have 16 channels
    assert forms.concatenated([narrow.q_proj, narrow.k_proj, narrow.v_proj]) is None


def test_greedy_on_the_fast_path_equals_generate(target):
    settings = DecodeSettings(max_new_tokens=24, gamma=4)
    fast = FastModel(target, compile_step=False)
    plain = list(autoregressive_decode(FastDecoder(fast, VOCAB), PROMPT, settings, fake_vocabulary()))[-1]
    drafter = ModelDrafter(FastDecoder(fast, VOCAB))  # a draft that always agrees: every cycle verifies γ + 1 rows
    speculative = list(speculative_decode(FastDecoder(fast, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))[-1]
    reference = target.generate(
        torch.tensor([PROMPT]),
        attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
        max_new_tokens=24,
        do_sample=False,
        pad_token_id=0,
    )[0, len(PROMPT) :].tolist()
    assert list(plain.new_token_ids) == reference, "plain decoding on the fast path parted from generate()"
    assert list(speculative.new_token_ids) == reference, "speculation on the fast path parted from generate()"
    assert speculative.tally.cycles <= 24 // 5 + 1, "a draft that always agrees should fill every window"


def test_the_cache_grows_past_its_first_allocation(target, monkeypatch):
    from specviz.engine import compiled

    monkeypatch.setattr(compiled, "CACHE_CHUNK", 64)
    fast = FastModel(target, compile_step=False)
    decoder = FastDecoder(fast, VOCAB)
    first = decoder.capacity
    ids = (PROMPT * 40)[: first + 20]  # longer than the first allocation
    expected = CachedDecoder(target, VOCAB).feed(ids)
    torch.testing.assert_close(decoder.feed(ids), expected, rtol=0, atol=1e-4)
    assert decoder.capacity > first


def test_enable_attaches_once_and_decoder_for_picks_it(target):
    model = grouped_llama(seed=2)
    assert decoder_for(model, VOCAB).__class__ is CachedDecoder  # not enabled: transformers' cache
    fast = enable(model, compile_step=False)
    assert fast is enable(model) is fast_model(model)
    assert isinstance(decoder_for(model, VOCAB), FastDecoder)
    assert "_specviz_fast_path" not in model.state_dict() and is_supported(model)


def test_a_failing_compiler_falls_back_to_eager_with_one_line(target, monkeypatch, caplog):
    fast = FastModel(target, compile_step=False)
    fast.report.compiled = True  # pretend a graph was asked for, then make "compiling" fail

    def broken(*inputs):
        raise RuntimeError("C++ compile error: no compiler")

    monkeypatch.setattr("specviz.engine.compiled.load_or_compile_module", broken)
    fast.warm_up()  # compiling happens before requests (the CLI, or the app's worker process), never inside one
    decoder = FastDecoder(fast, VOCAB)
    assert decoder.engine == "eager"
    logits = decoder.feed(PROMPT)
    torch.testing.assert_close(logits, CachedDecoder(target, VOCAB).feed(PROMPT), rtol=0, atol=1e-4)
    lines = [record.getMessage() for record in caplog.records if record.name.startswith("specviz")]
    assert len(lines) == 1 and "runs eager" in lines[0], lines  # logged (stderr), never printed into a command's output
    assert not fast.report.compiled


@pytest.mark.slow
@pytest.mark.parametrize("form", ["float32", "int8"])
def test_the_compiled_step_matches_eager_and_keeps_rows_independent(target, form):
    """torch.compile of the decoder layer (one graph for every row count) on the tiny grouped Llama: in a weight-only
    form a token's logits are bit-identical alone (decode steps) and inside a verify pass, which keeps speculation on
    the compiled path exact; in float32 they agree to rounding (GEMMs block by rows)."""
    model = target if form == "float32" else weight_only(target, form)
    tolerance = 1e-4 if form == "float32" else 0.0
    eager = FastDecoder(FastModel(model, compile_step=False), VOCAB)
    compiled_model = FastModel(model, compile_step=True)
    if not compiled_model.report.compiled:
        pytest.skip(compiled_model.report.reason)
    compiled_model.warm_up()  # compiled before any request (a decoder never compiles)
    compiled = FastDecoder(compiled_model, VOCAB)
    assert compiled.engine == "compiled", compiled_model.report.reason
    compiled.feed(PROMPT)
    start = compiled.cached_length
    together = compiled.feed([1, 2, 3], keep_last=3)
    compiled.truncate(start)
    alone = torch.cat([compiled.feed([token]) for token in [1, 2, 3]])
    torch.testing.assert_close(together, alone, rtol=0, atol=tolerance)  # the compiled verify rows are the decode steps'
    # compiled against eager: Inductor's reductions (RMSNorm's mean, softmax's sums) add in their own order, so in a
    # weight-only form the two agree to bf16 rounding only (bit for bit on this tiny model; up to 0.66 in a logit of
    # the real pair in int4, docs/performance.md)
    compiled.reset()
    for tokens in (PROMPT, [7], [8, 9, 10, 11], [12]):
        got, expected = compiled.feed(tokens, len(tokens)), eager.feed(tokens, len(tokens))
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-4 if form == "float32" else 0.5)
    assert set(compiled_model.report.seconds) in ({"compile"}, {"load"})


@pytest.mark.slow
def test_a_compiled_package_runs_the_loaded_models_weights_and_is_loaded_on_restart(tmp_path, monkeypatch):
    """Packages are keyed by layout, not by weights' values (engine/aot_step.py): a second model of the same layout
    must load the first one's package and still compute with its own weights, and so must a model whose weights
    change after loading (they are read in place)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    first_model, second_model = weight_only(grouped_llama(seed=0), "int8"), weight_only(grouped_llama(seed=1), "int8")
    first = FastModel(first_model, compile_step=True)
    if not first.report.compiled:
        pytest.skip(first.report.reason)
    assert set(first.warm_up().seconds) == {"compile"}
    second = enable(second_model, compile_step=True)
    if second is None:  # AVX2 kernels: weight-only forms attend row by row, off the fast path (models/weight_forms.py)
        pytest.skip("weight-only models stay off the fast path on AVX2 kernels")
    pair = SimpleNamespace(target=SimpleNamespace(model=second_model), draft=None)
    assert load_cached_packages(pair) == {}  # cached: loaded at once, nothing left to compile
    assert set(second.report.seconds) == {"load"} and pair_engine(pair) == "compiled"
    for fast, model in ((first, first_model), (second, second_model)):
        got = FastDecoder(fast, VOCAB)
        got.feed(PROMPT[:1])
        logits = got.feed(PROMPT[1:], keep_last=len(PROMPT) - 1)
        expected = FastDecoder(FastModel(model, compile_step=False), VOCAB).feed(PROMPT, keep_last=len(PROMPT) - 1)
        torch.testing.assert_close(logits, expected, rtol=0, atol=0.5)  # bf16 reductions in another order only
    with torch.no_grad():
        second.forward.norm.weight.mul_(-1)  # the final norm's sign flips every logit: read in place, so seen
    flipped = FastDecoder(second, VOCAB)
    flipped.feed(PROMPT[:1])
    assert torch.equal(flipped.feed(PROMPT[1:2]).sign(), -logits[:1].sign())


def biased_qwen2(seed: int = 0):
    """A tiny Qwen2: Llama's layout with biases on q, k and v (large ones, so a dropped bias could not hide)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**tiny.small_shape(VOCAB, **tiny.GROUPED), tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * (0.5 if parameter.dim() > 1 else 2.0))
    return model


@pytest.mark.parametrize("form", ["int8", "int4"])
def test_qwen2_biases_run_on_the_fast_path_fused_and_rows_independent(form):
    """Qwen2's q/k/v biases survive the weight form and the fused q/k/v call: the fast path gives transformers' own
    logits in that form, and a token's logits are the same alone and inside a verify pass."""
    model = weight_only(biased_qwen2(), form)
    assert is_supported(model)
    fast_forward = FastModel(model, compile_step=False)
    assert forms.form_of(fast_forward.forward.qkv[0]) is not None and fast_forward.forward.qkv[0].bias is not None
    reference, fast = CachedDecoder(model, VOCAB), FastDecoder(fast_forward, VOCAB)
    torch.testing.assert_close(
        fast.feed(PROMPT, keep_last=len(PROMPT)), reference.feed(PROMPT, keep_last=len(PROMPT)), rtol=0, atol=0.05
    )
    together, alone = pass_and_steps(fast, [1, 2, 3, 4, 5])
    assert torch.equal(together, alone), f"max |Δ logit| {(together - alone).abs().max():.2e} between a pass and single steps"


def test_a_narrow_model_decodes_with_inductors_loops_on_one_thread_where_torch_has_several(target, monkeypatch):
    """engine/compiled.decode_glue_threads: one thread for the glue of a model of hidden size up to 512 when torch runs
    several threads; torch's count for a wider model, on one thread, or where the user says so."""
    monkeypatch.delenv("SPECVIZ_GLUE_THREADS", raising=False)
    wide = SimpleNamespace(config=SimpleNamespace(hidden_size=1536), device=torch.device("cpu"))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert decode_glue_threads(target) == 1 and decode_glue_threads(wide) is None
    monkeypatch.setenv("SPECVIZ_GLUE_THREADS", "1")
    assert decode_glue_threads(wide) == 1
    monkeypatch.setenv("SPECVIZ_GLUE_THREADS", "all")
    assert decode_glue_threads(target) is None
    monkeypatch.delenv("SPECVIZ_GLUE_THREADS")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert decode_glue_threads(target) is None


def test_a_prompt_takes_the_long_prompt_package_and_decoding_the_other(target):
    """A forward of more than LONG_ROWS rows goes through the long-prompt package; steps and verify passes through the
    decoding one (here both are the eager stack behind a recorder, so the logits are checked too)."""
    fast = FastModel(target, compile_step=False)
    calls = []

    def package(name):
        def run(x, *tensors):
            calls.append((name, x.shape[0]))
            return fast.forward.layers_forward(x, static_cache.Rows(*tensors[:5]), list(tensors[5:]))

        return run

    fast.package = package("decoding")
    fast.long_prompts = SimpleNamespace(package=package("long prompts"))
    decoder = FastDecoder(fast, VOCAB)
    prompt = (PROMPT * 20)[: LONG_ROWS + 1]
    logits = decoder.feed(prompt)
    decoder.feed([1])
    decoder.feed([2, 3, 4], keep_last=3)
    assert calls == [("long prompts", LONG_ROWS + 1), ("decoding", 1), ("decoding", 3)]
    torch.testing.assert_close(logits, CachedDecoder(target, VOCAB).feed(prompt), rtol=0, atol=1e-4)


@pytest.mark.slow
def test_the_long_prompt_package_gives_the_decoding_packages_bits(target, tmp_path, monkeypatch):
    """On two threads a narrow model gets two packages: Inductor's loops on one thread (decoding) and on both (long
    prompts). They split the same work differently and must reduce in the same order: the same bits for every row, so
    which of them fed a prompt changes no decision."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPECVIZ_GLUE_THREADS", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fast = FastModel(weight_only(target, "int8"), compile_step=True)
        if not fast.report.compiled:
            pytest.skip(fast.report.reason)
        assert fast.glue_threads == 1 and fast.long_prompts is not None
        assert set(fast.warm_up().seconds) == {"compile"}
        assert fast.package is not None and fast.long_prompts.package is not None
        prompt = torch.tensor((PROMPT * 20)[: LONG_ROWS + 9])
        x = fast.forward.embed_tokens(prompt)
        rows = fast.rows(len(prompt), 0, None)
        decoding, long = (package(x, *rows, *fast.new_cache(256)) for package in (fast.package, fast.long_prompts.package))
        assert all(torch.equal(a, b) for a, b in zip(decoding, long, strict=True))
        assert fast.is_cached() and fast.load_cached()
    finally:
        torch.set_num_threads(threads)
