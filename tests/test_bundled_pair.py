"""The bundled pair is a real trained pair: exact on real text, and its distilled draft is well aligned."""

import pytest
import torch

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, DecodeSettings, speculative_decode
from specviz.models.catalogue import load_catalogue
from specviz.models.loading import load_pair
from specviz.prompts.sets import PROMPTS
from specviz.run.runner import encode_prompt, run
from tests.tiny import tiny_llama

PROMPTS_USED = PROMPTS["code"][:4]


def greedy_alpha(pair, prompts, draft_model=None) -> float:
    accepted = tested = 0
    settings = DecodeSettings(max_new_tokens=48, gamma=4)
    for prompt in prompts:
        if draft_model is None:
            summary = list(run(pair, prompt, settings))[-1]
        else:
            ids = encode_prompt(pair, prompt, 48, 4)
            drafter = ModelDrafter(CachedDecoder(draft_model, pair.shared_vocab_size))
            summary = list(
                speculative_decode(
                    CachedDecoder(pair.target.model, pair.shared_vocab_size), drafter, ids, settings, pair.vocabulary
                )
            )[-1]
        accepted += summary.tally.accepted
        tested += summary.tally.accepted + summary.tally.rejections
    return accepted / tested


def test_greedy_equals_transformers_generate_on_real_code(bundled_pair):
    for prompt in PROMPTS_USED:
        ids = encode_prompt(bundled_pair, prompt, 40, 4)
        ours = list(run(bundled_pair, prompt, DecodeSettings(max_new_tokens=40, gamma=4)))[-1].new_token_ids
        tensor = torch.tensor([ids])
        reference = bundled_pair.target.model.generate(
            tensor, attention_mask=torch.ones_like(tensor), max_new_tokens=40, do_sample=False
        )
        assert list(ours) == reference[0, len(ids) :].tolist()[: len(ours)], f"diverged on {prompt!r}"


def test_distilled_draft_is_far_better_aligned_than_chance(bundled_pair):
    vocab = bundled_pair.shared_vocab_size
    random_draft = tiny_llama(vocab, seed=0, hidden=64, layers=1)
    alpha_distilled = greedy_alpha(bundled_pair, PROMPTS_USED)
    alpha_random = greedy_alpha(bundled_pair, PROMPTS_USED, random_draft)
    assert alpha_distilled > 0.5, f"the distilled draft's greedy α is only {alpha_distilled:.2f}"
    assert alpha_distilled > alpha_random + 0.3, f"distilled α {alpha_distilled:.2f} vs random {alpha_random:.2f}"


def test_plain_draft_is_less_aligned_than_the_distilled_one(bundled_pair):
    catalogue = load_catalogue()
    plain = load_pair("pycode-plain", catalogue.get("pycode-plain"), catalogue.offline_pairs())
    alpha_plain, alpha_distilled = greedy_alpha(plain, PROMPTS_USED), greedy_alpha(bundled_pair, PROMPTS_USED)
    assert alpha_distilled > alpha_plain, f"distilled α {alpha_distilled:.2f} should beat the plain draft's {alpha_plain:.2f}"


def test_bundle_is_small_and_loads_as_float32(bundled_pair):
    from pathlib import Path

    assets = Path(__file__).resolve().parent.parent / "assets"
    pycode = sum(f.stat().st_size for f in assets.glob("pycode-*/*.safetensors.xz"))  # as git keeps them, packed
    assert pycode < 50 * 2**20, f"the bundled pycode weights are {pycode / 2**20:.1f} MiB"
    # the whole repository's size: tests/test_stored.py
    assert bundled_pair.target.model.dtype == torch.float32


@pytest.mark.parametrize("prompt", ["def ", "import ", "class Point:"])
def test_target_writes_something(bundled_pair, prompt):
    text = list(run(bundled_pair, prompt, DecodeSettings(max_new_tokens=24)))[-1].text
    assert text.strip(), f"the target produced only whitespace after {prompt!r}"
