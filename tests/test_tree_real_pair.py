"""Token trees on the real pair: SmolLM2-135M-Instruct drafted for by its feature head, grown EAGLE-2's way.

Greedy output must equal transformers' generate() in float32 (on transformers' cache and on the fast path), and plain
decoding in the int4 form the pair ships in on the static-cache fast path, eager and compiled (engine/static_cache.py:
each row over exactly its path's keys). transformers' own tree forward is exact to rounding only (a node's cousins sit
masked between its ancestors), so Llama-family trees run on the fast path.
Slow: it needs the real model (tests/conftest.py).
"""

import pytest
import torch
from transformers import AutoModelForCausalLM

from specviz.drafting.drafters import FeatureDrafter
from specviz.engine import CachedDecoder, DecodeSettings, autoregressive_decode
from specviz.engine.compiled import FastDecoder, FastModel
from specviz.engine.speculative import speculative_decode
from specviz.engine.tree_shape import TreeShape
from specviz.models.catalogue import load_catalogue
from specviz.models.feature_head import load_head
from specviz.models.weight_forms import apply_form
from specviz.prompts.sets import CHAT_HELDOUT
from specviz.run.runner import encode_prompt
from tests.conftest import REAL_PAIR

SHAPE = TreeShape((3, 2, 1), expanded=2)
NEW_TOKENS = 32
ENGINES = ["transformers", "fast"]


def decoder(model, vocab: int, engine: str):
    if engine == "transformers":
        return CachedDecoder(model, vocab)
    fast = FastModel(model, compile_step=engine == "compiled")
    if engine == "compiled" and not fast.warm_up().compiled:
        pytest.skip(f"the step cannot compile here: {fast.report.reason}")
    return FastDecoder(fast, vocab)


def tree_output(model, head, ids, vocabulary, vocab, shape=SHAPE, new_tokens=NEW_TOKENS, engine="transformers") -> list[int]:
    events = list(
        speculative_decode(
            decoder(model, vocab, engine),
            FeatureDrafter(head, vocab, compiled=False),
            ids,
            DecodeSettings(max_new_tokens=new_tokens, tree=shape),
            vocabulary,
        )
    )
    return list(events[-1].new_token_ids)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("question", CHAT_HELDOUT[:3])
def test_feature_head_tree_equals_generate_in_float32(real_pair, question, engine):
    ids = encode_prompt(real_pair, question, NEW_TOKENS, 8)
    model, vocab = real_pair.target.model, real_pair.shared_vocab_size
    ours = tree_output(model, real_pair.feature_head.head, ids, real_pair.vocabulary, vocab, engine=engine)
    tensor = torch.tensor([ids])
    reference = model.generate(tensor, attention_mask=torch.ones_like(tensor), max_new_tokens=NEW_TOKENS, do_sample=False)
    assert ours == reference[0, len(ids) :].tolist()[: len(ours)], f"the tree parted from generate() on {question!r}"


# question 3 under the shape 2×1 parted from plain decoding at a three-way bf16 tie after 31 tokens, before tree rows
# attended over their own keys only; question 13 under nodes=8,depth=4 parted at a tie after 33 tokens on the fast path
# while its rows' values were read in place; the compiled tree pass parted from the compiled chain before it ran the
# same package (issue 35)
@pytest.mark.parametrize("engine", ["fast", "compiled"])
@pytest.mark.parametrize(
    "question,shape,new_tokens",
    [(3, TreeShape((2, 1), expanded=1), 48), (4, SHAPE, NEW_TOKENS), (13, TreeShape.dynamic(nodes=8, depth=4), 48)],
)
def test_feature_head_tree_equals_plain_decoding_in_int4(real_pair, question, shape, new_tokens, engine):
    model = apply_form(AutoModelForCausalLM.from_pretrained(real_pair.target.reference, dtype=torch.bfloat16).eval(), "int4")
    head = load_head(load_catalogue().get(REAL_PAIR).feature_head_ref, model)
    ids = encode_prompt(real_pair, CHAT_HELDOUT[question], new_tokens, 8)
    vocab = real_pair.shared_vocab_size
    settings = DecodeSettings(max_new_tokens=new_tokens)
    plain = list(autoregressive_decode(decoder(model, vocab, engine), ids, settings, real_pair.vocabulary))[-1].new_token_ids
    ours = tree_output(model, head, ids, real_pair.vocabulary, vocab, shape, new_tokens, engine)
    assert ours == list(plain), f"{engine}: the tree {shape} parted from plain decoding in int4 on held-out question {question}"
