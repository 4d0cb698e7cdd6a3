"""The row-independence checks of one CPU kernel set, run in a child process (tests/test_row_independence.py starts one
per kernel set, with ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA chosen before torch loads): `python -m
tests.row_kernels OUT.json FORM... [--compiled]`. Each check compares a row computed alone with the same row beside others and
writes the largest |Δ| (0.0: bit-identical), or whether greedy speculation equalled plain decoding; the parent asserts.

- attention: models/row_attention.py's function on SmolLM2's attention shapes (9 query heads over 3 key/value heads of
  64), a pass of k rows after 300 keys against each row alone over the keys it sees, for k = 1 … 33 (oneDNN picks its
  bf16 kernel by the rows' count: one row and several take different kernels with AMX), and a token tree's nodes
  against their paths; transformers' eager attention on the same inputs, to show the check can fail where oneDNN's
  kernels depend on the rows;
- linear: each weight-only form's layer on SmolLM2's widths, k rows against each alone, k = 1 … 33 (the int4 and int8
  kernels take 1 to 4 rows a call, w4a8 up to 8 on AVX-512 and 2 on AVX2); plain bf16 (oneDNN) reported beside them;
- model: a small grouped Llama in the form, through transformers' forward (CachedDecoder), the fast path run eager
  (FastDecoder) and, with --compiled, its AOTInductor package, and a small GPT-2 (an architecture the fast path does
  not take) through transformers' forward: a chain's verify pass against one-token steps, a
  tree's nodes against their paths' steps, and greedy speculation (a chain, a tree, a feature head) against plain
  decoding on the same decoder;
- libraries: how many oneDNN primitives and MKL calls ran during those forwards (none may: a row-exact forward must
  not reach a library that chooses its kernel by the rows' count, AMX's included), and the ISA oneDNN reports.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import replace

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.models.llama.modeling_llama import eager_attention_forward

from specviz.drafting.drafters import FeatureDrafter, ModelDrafter
from specviz.engine import CachedDecoder, DecodeSettings, autoregressive_decode, speculative_decode
from specviz.engine.compiled import FastDecoder, FastModel
from specviz.engine.tree import ROOT, TokenTree, verify_tree
from specviz.engine.tree_shape import TreeShape
from specviz.kernels import forms, w4a8
from specviz.models.feature_head import head_from_target
from specviz.models.row_attention import row_exact_attention
from specviz.models.weight_forms import apply_form
from tests.tiny import fake_vocabulary, grouped_llama

VOCAB = 64
PROMPT = [3, 17, 5, 42, 8, 8, 9, 30, 31, 2, 7, 7, 60, 1, 4, 22, 19, 11, 5, 3, 40, 41, 42, 43, 9]
LONG_PROMPT = (PROMPT * 6)[:-3]  # 147 tokens: softmax rows reduced in vector blocks and a tail
TREE = TokenTree((11, 12, 13, 14, 15, 16, 17, 18, 19), (ROOT, ROOT, 0, 0, 1, 2, 2, 4, 7))
NEW_TOKENS = 32
ROW_COUNTS = (1, 2, 3, 4, 5, 8, 9, 17, 33)  # each int4/int8 micro-kernel (1–4 rows), w4a8's chunks of 2 and 8 and past them
HEADS, KV_HEADS, HEAD_DIM, KEYS = 9, 3, 64, 300  # SmolLM2-135M's attention, after a 300-token context
WIDTHS = ((576, 1536), (1536, 576), (576, 192))  # SmolLM2's MLP and key/value projections
METHODS = ("4", "2x1x1:1")  # a chain of γ drafts and a token tree


def largest(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


# -- attention ------------------------------------------------------------------------------------------------------


class AttentionModule(nn.Module):
    """What an attention function reads of its module (transformers' Llama attention)."""

    num_key_value_groups = HEADS // KV_HEADS


def causal(rows: int, keys: int) -> torch.Tensor:
    """eager_mask's additive mask for `rows` new rows at the end of `keys` keys: 0 seen, the dtype's minimum not."""
    seen = torch.arange(keys)[None, :] <= torch.arange(keys - rows, keys)[:, None]
    return torch.zeros(1, 1, rows, keys, dtype=torch.bfloat16).masked_fill(~seen, torch.finfo(torch.bfloat16).min)


def attention_rows(attend) -> float:
    """The last k of 33 new rows in one call, against each row alone over the keys it sees (a one-token step of it)."""
    generator = torch.Generator().manual_seed(0)
    last = max(ROW_COUNTS)
    query = torch.randn(1, HEADS, last, HEAD_DIM, generator=generator).bfloat16()
    key, value = (torch.randn(1, KV_HEADS, KEYS, HEAD_DIM, generator=generator).bfloat16() for _ in range(2))
    module, scaling = AttentionModule(), HEAD_DIM**-0.5
    alone = []
    for r in range(last):
        seen = KEYS - last + r + 1
        q = query[:, :, r : r + 1]
        alone.append(attend(module, q, key[:, :, :seen], value[:, :, :seen], causal(1, seen), scaling)[0][:, 0])
    worst = 0.0
    for rows in ROW_COUNTS:
        together = attend(module, query[:, :, last - rows :], key, value, causal(rows, KEYS), scaling)[0]  # (1, rows, heads, d)
        worst = max(worst, max(largest(together[:, r], alone[last - rows + r]) for r in range(rows)))
    return worst


def attention_tree(attend) -> float:
    """A tree's nodes after 300 context keys, in one call with the tree's mask, against each node alone over its
    context and ancestors (the keys a one-token step of its path holds, in order)."""
    generator = torch.Generator().manual_seed(99)
    nodes, context = len(TREE), KEYS
    query = torch.randn(1, HEADS, nodes, HEAD_DIM, generator=generator).bfloat16()
    key, value = (torch.randn(1, KV_HEADS, context + nodes, HEAD_DIM, generator=generator).bfloat16() for _ in range(2))
    visible = torch.zeros(nodes, context + nodes, dtype=torch.bool)
    visible[:, :context] = True
    for node in range(nodes):
        visible[node, [context + n for n in TREE.path(node)]] = True
    mask = torch.zeros(1, 1, nodes, context + nodes, dtype=torch.bfloat16).masked_fill(~visible, torch.finfo(torch.bfloat16).min)
    module, scaling = AttentionModule(), HEAD_DIM**-0.5
    together = attend(module, query, key, value, mask, scaling)[0]
    worst = 0.0
    for node in range(nodes):
        keys = visible[node].nonzero()[:, 0]
        alone = attend(module, query[:, :, node : node + 1], key[:, :, keys], value[:, :, keys], None, scaling)[0]
        worst = max(worst, largest(together[:, node], alone[:, 0]))
    return worst


def attention_checks() -> dict:
    return {
        "row_exact": attention_rows(row_exact_attention),
        "row_exact_tree": attention_tree(row_exact_attention),
        "eager": attention_rows(eager_attention_forward),  # transformers' own
    }


# -- linear layers --------------------------------------------------------------------------------------------------


def linear_rows(layer: nn.Module, width: int) -> float:
    generator = torch.Generator().manual_seed(width)
    x = torch.randn(max(ROW_COUNTS), width, generator=generator).bfloat16()
    alone = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
    with torch.inference_mode():
        return max(largest(layer(x[:rows]), alone[:rows]) for rows in ROW_COUNTS)


def linear_checks(form_names: list[str]) -> dict:
    makers = {name: form.layer for name, form in forms.FORMS.items()}
    found = {}
    for form in form_names:
        worst = 0.0
        for n_in, n_out in WIDTHS:
            linear = nn.Linear(n_in, n_out, bias=False)
            with torch.no_grad():
                layer = makers[form](linear) if makers[form] else linear.to(torch.bfloat16)
                worst = max(worst, linear_rows(layer, n_in))
        found[form] = worst
    return found


# -- a model in the form, on both decoders --------------------------------------------------------------------------


def decoders(model, compiled: bool = False) -> dict:
    """How a pair can run its target: transformers' forward, the fast path eager, and (asked for) its compiled package."""
    fast = FastModel(model, compile_step=False)
    found = {"transformers": lambda: CachedDecoder(model, VOCAB), "fast path": lambda: FastDecoder(fast, VOCAB)}
    if compiled:
        package = FastModel(model, compile_step=True)
        if not package.report.compiled or package.build() is None:
            raise RuntimeError(f"the step did not compile: {package.report.reason}")
        found["compiled"] = lambda: FastDecoder(package, VOCAB)
    return found


def prefilled(make, prompt: list[int]):
    decoder = make()
    decoder.feed(prompt[:-1])
    return decoder


def chain_rows(make, prompt: list[int]) -> float:
    """A verify pass of k rows against the same tokens fed one step at a time, for k = 5 and 17."""
    worst = 0.0
    for rows in (5, 17):
        decoder = prefilled(make, prompt)
        start = decoder.cached_length
        tokens = [prompt[-1], *range(20, 20 + rows - 1)]
        together = decoder.feed(tokens, keep_last=rows)
        decoder.truncate(start)
        alone = torch.cat([decoder.feed([token]) for token in tokens])
        worst = max(worst, largest(together, alone))
    return worst


def tree_rows(make, prompt: list[int]) -> float:
    """A tree's nodes in one verify pass against each node's path decoded one token per step."""
    tree_logits, _ = verify_tree(prefilled(make, prompt), prompt, TREE)
    worst = 0.0
    for node in range(len(TREE)):
        steps = prefilled(make, prompt)
        for token in [prompt[-1], *(TREE.token_ids[n] for n in TREE.path(node))]:
            expected = steps.feed([token])[-1]
        worst = max(worst, largest(tree_logits[node + 1], expected))
    return worst


def settings_for(method: str, new_tokens: int = NEW_TOKENS) -> DecodeSettings:
    """A chain of γ drafts ("4"), or a token tree of the shape given."""
    if method.isdigit():
        return DecodeSettings(max_new_tokens=new_tokens, gamma=int(method))
    return replace(DecodeSettings(max_new_tokens=new_tokens), tree=TreeShape.parse(method))


def greedy(make) -> list[int]:
    """Plain greedy decoding on the decoder."""
    events = autoregressive_decode(make(), PROMPT, DecodeSettings(max_new_tokens=NEW_TOKENS), fake_vocabulary())
    return list(list(events)[-1].new_token_ids)


def speculative(make, drafter_of, method: str) -> list:
    """Greedy speculative decoding's events on the decoder."""
    return list(speculative_decode(make(), drafter_of(), PROMPT, settings_for(method), fake_vocabulary()))


def gpt2(seed: int, noise: float = 0.0) -> GPT2LMHeadModel:
    """A small GPT-2 (Conv1D projections, learned positions): an architecture the fast path does not take, so it
    decodes through transformers' forward only."""
    config = GPT2Config(vocab_size=VOCAB, n_embd=128, n_layer=2, n_head=4, n_positions=512, bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(config).eval()
    generator, noisy = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
                parameter.add_(torch.randn(parameter.shape, generator=noisy) * noise)
    return model


def decoder_checks(make, draft, head=None) -> dict:
    """One decoder of the target: a chain's rows, a tree's nodes, and greedy speculation against plain decoding."""
    plain = greedy(make)
    drafters = [(method, lambda: ModelDrafter(CachedDecoder(draft, VOCAB))) for method in METHODS]
    if head is not None:
        drafters.append(("3, feature head", lambda: FeatureDrafter(head, VOCAB)))
    identical, accepted = {}, {}
    for method, drafter_of in drafters:
        events = speculative(make, drafter_of, method.split(",")[0])
        identical[method] = list(events[-1].new_token_ids) == plain
        accepted[method] = events[-1].tally.accepted
    return {
        "chain": max(chain_rows(make, prompt) for prompt in (PROMPT, LONG_PROMPT)),
        "tree": tree_rows(make, PROMPT),
        "identical": identical,
        "accepted": accepted,
    }


def model_checks(form: str, compiled: bool = False) -> dict:
    """A grouped Llama on every decoder that takes it, and a GPT-2 on transformers' forward, all in `form`."""
    target, draft = grouped_llama(seed=0), grouped_llama(seed=0, noise=0.02)
    head = head_from_target(target, list(range(VOCAB))).to(torch.bfloat16).eval()  # from the unquantised layer
    apply_form(target, form)
    apply_form(draft, form)
    found = {}
    for name, make in decoders(target, compiled).items():
        assert name != "compiled" or make().engine == "compiled", "the compiled decoder runs eager"
        found[name] = decoder_checks(make, draft, head)
    gpt2_target, gpt2_draft = apply_form(gpt2(seed=0), form), apply_form(gpt2(seed=0, noise=0.02), form)
    found["transformers, GPT-2"] = decoder_checks(lambda: CachedDecoder(gpt2_target, VOCAB), gpt2_draft)
    return found


# -- which libraries a forward reaches ------------------------------------------------------------------------------


@contextmanager
def captured_stdout(path: str):
    """Everything written to file descriptor 1 (C libraries' verbose lines included) goes to `path` meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "w") as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def library_checks(form: str) -> dict:
    """oneDNN primitives and MKL calls during chain passes, steps and a tree pass on both decoders in the form
    (MKL_VERBOSE is set by the parent)."""
    model = apply_form(grouped_llama(seed=0), form)
    makers = decoders(model)
    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "verbose.txt")
        with captured_stdout(log), torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            for make in makers.values():
                chain_rows(make, PROMPT)
                verify_tree(prefilled(make, PROMPT), PROMPT, TREE)
        lines = open(log).read().splitlines()
    return {
        "onednn": sum(",exec," in line for line in lines if line.startswith("onednn_verbose")),
        "mkl": sum(line.startswith("MKL_VERBOSE") and "GEMM" in line for line in lines),
    }


def onednn_isa() -> str:
    """The instruction set oneDNN says it runs (its first verbose lines), for a bf16 product; where torch takes no
    oneDNN kernel for bf16 (an AVX2 machine), says so."""
    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "isa.txt")
        with captured_stdout(log), torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            torch.randn(5, 64).bfloat16() @ torch.randn(64, 300).bfloat16()
        isa = [line.split("isa:", 1)[1] for line in open(log).read().splitlines() if "isa:" in line]
    return isa[0] if isa else "none: torch takes no oneDNN kernel for bf16 products here"


def main(out: str, form_names: list[str], compiled: bool) -> None:
    torch.set_num_threads(2)  # as the app runs: how a kernel splits its work over threads must not reach a row either
    available = [form for form in form_names if form != "w4a8" or w4a8.available()]
    exact = [form for form in available if form != "bf16"]
    results = {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "onednn_isa": onednn_isa(),
        "forms": exact,
        "w4a8_path": w4a8.path() if "w4a8" in available else None,  # the kernel's path under this kernel set
        "attention": attention_checks(),
        "linear": linear_checks(available),
    }
    torch.set_num_threads(1)  # the models' many small products: as the test suite runs them (tests/conftest.py)
    results["model"] = {form: model_checks(form, compiled) for form in exact}
    results["libraries"] = {form: library_checks(form) for form in exact}
    with open(out, "w") as handle:
        json.dump(results, handle, indent=1)


if __name__ == "__main__":
    arguments = sys.argv[2:]
    main(sys.argv[1], [form for form in arguments if form != "--compiled"], "--compiled" in arguments)
