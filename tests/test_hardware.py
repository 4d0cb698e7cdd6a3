"""Every architecture family in the catalogue, built from a recorded shape: exact speculative decoding on each,
and the `hardware` command on tiny stand-ins (nothing is downloaded)."""

import math
from pathlib import Path

import pytest
import torch

from specviz.analysis.hardware_cache import hardware_sentence
from specviz.deployment.hardware import build_random
from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, DecodeSettings, speculative_decode
from specviz.models.catalogue import Architecture, load_catalogue
from specviz.models.footprint import config_of, count_parameters
from tests.test_cli import specviz, specviz_json
from tests.test_greedy_exact import PROMPT, VOCAB, final, transformers_greedy
from tests.tiny import fake_vocabulary

ASSETS = Path(__file__).resolve().parent.parent / "assets"

FAMILIES = ["llama", "qwen2", "gpt_neox", "gpt2"]


def tiny(family: str, layers: int = 2, vocab: int = VOCAB, tie: bool = False) -> Architecture:
    kv_heads = 2 if family in ("llama", "qwen2") else None  # grouped-query attention where the family has it
    return Architecture(
        family=family,
        hidden_size=32,
        layers=layers,
        heads=4,
        kv_heads=kv_heads,
        intermediate_size=64,
        vocab_size=vocab,
        tie_embeddings=tie,
        context=256,
    )


def random_model(architecture: Architecture, seed: int):
    """Built the way `hardware` builds it, then given larger random weights so its choices are not near-ties."""
    model = build_random(config_of(architecture), torch.float32, torch.device("cpu"), seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model


def test_the_catalogue_records_every_hub_model():
    catalogue = load_catalogue()
    hub = {ref for pair in catalogue.pairs.values() for ref in (pair.target, pair.draft) if not Path(pair.resolve(ref)).exists()}
    assert hub <= set(catalogue.architectures), f"no architecture for {sorted(hub - set(catalogue.architectures))}"
    assert {a.family for a in catalogue.architectures.values()} == set(FAMILIES)


@pytest.mark.parametrize(
    "reference,parameters",
    [
        ("HuggingFaceTB/SmolLM2-135M-Instruct", 134_515_008),
        ("Qwen/Qwen2.5-0.5B-Instruct", 494_032_768),
        ("EleutherAI/pythia-70m-deduped", 70_426_624),
        ("openai-community/gpt2", 124_439_808),
    ],
)
def test_recorded_shapes_give_the_published_parameter_counts(reference, parameters):
    """Counted on the meta device: the recorded fields describe the real models (published sizes)."""
    assert count_parameters(config_of(load_catalogue().architecture(reference))) == parameters


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("draft_kind", ["smaller", "padded-vocabulary", "tied"])
def test_greedy_speculative_equals_target_greedy_in_every_family(family, draft_kind):
    """Cache cropping, position ids and padded vocabularies differ by family; the output must not."""
    target = random_model(tiny(family), seed=0)
    if draft_kind == "smaller":
        draft = random_model(tiny(family, layers=1), seed=1)
    elif draft_kind == "padded-vocabulary":  # like Qwen2.5 0.5B's 151,936 rows against 7B's 152,064
        draft = random_model(tiny(family, layers=1, vocab=VOCAB + 16), seed=2)
    else:
        draft = random_model(tiny(family, layers=1, tie=True), seed=3)
    settings = DecodeSettings(max_new_tokens=30, gamma=3)
    drafter = ModelDrafter(CachedDecoder(draft, VOCAB))
    summary = final(speculative_decode(CachedDecoder(target, VOCAB), drafter, PROMPT, settings, fake_vocabulary()))
    assert list(summary.new_token_ids) == transformers_greedy(target, PROMPT, 30), f"{family} ({draft_kind}) diverged from greedy"
    assert summary.tally.rejections > 0, "a random draft should be rejected sometimes, or this test proves little"


TINY_CATALOGUE = """
default: tiny-pair
pairs:
  tiny-pair:
    target: tiny/target
    draft: tiny/draft
    description: two tiny stand-ins for hub models
    gamma: 3
architectures:
  tiny/target: {family: qwen2, hidden_size: 64, layers: 2, heads: 4, kv_heads: 2, intermediate_size: 128, vocab_size: 160, tie_embeddings: false}
  tiny/draft: {family: qwen2, hidden_size: 32, layers: 1, heads: 4, kv_heads: 2, intermediate_size: 64, vocab_size: 128, tie_embeddings: true}
"""


@pytest.fixture
def tiny_catalogue(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(TINY_CATALOGUE)
    return {"SPECVIZ_CATALOGUE": str(path), "SPECVIZ_CACHE": str(tmp_path / "cache")}


def test_hardware_json_and_the_saved_sentence(tiny_catalogue, tmp_path):
    output = specviz_json("hardware", "--alpha", "0.8", "--repeats", "2", "--save", "--json", env=tiny_catalogue)
    assert {
        "tau",
        "verify_cost",
        "target_parameters",
        "draft_parameters",
        "device",
        "dtype",
        "predicted_speedup",
    } <= output.keys()
    assert output["target_parameters"] > output["draft_parameters"] > 0 and output["dtype"] == "float32"
    assert output["tau"] > 0 and output["verify_cost"] > 0 and output["predicted_speedup"] > 0
    assert [row["alpha"] for row in output["predictions"]] == [0.5, 0.6, 0.7, 0.8, 0.9]
    sentence = hardware_sentence("tiny-pair", path=tmp_path / "cache" / "hardware.json", device="cpu")
    assert sentence and "τ = " in sentence and "α = 0.80" in sentence, sentence
    assert output["engine"] and output["engine"] in sentence  # which engine was timed: the numbers' meaning
    assert hardware_sentence("other-pair", path=tmp_path / "cache" / "hardware.json", device="cpu") is None
    assert hardware_sentence("tiny-pair", path=tmp_path / "nothing-here.json", device="cpu") is None


def test_hardware_times_the_weight_form_the_pair_runs(tiny_catalogue):
    """`--weights` (or the pair's `weights:`) puts the timed models in that form, as load_pair does: ν(k) of a bf16
    forward says nothing of an int8 one."""
    plain = specviz_json("hardware", "--alpha", "0.8", "--repeats", "1", "--json", env=tiny_catalogue)
    assert plain["target_form"] is None and plain["draft_form"] is None
    formed = specviz_json("hardware", "--weights", "int8", "--alpha", "0.8", "--repeats", "1", "--json", env=tiny_catalogue)
    assert formed["target_form"] == "int8" and formed["draft_form"] == "int8" and formed["verify_cost"] > 0
    said = specviz("hardware", "--weights", "int8", "--alpha", "0.8", "--repeats", "1", env=tiny_catalogue).stdout
    assert "target in int8" in said


def test_hardware_measures_nu_by_rows_and_theory_chooses_a_tree_with_it(tiny_catalogue):
    output = specviz_json("hardware", "--alpha", "0.8", "--repeats", "1", "--rows", "64", "--save", "--json", env=tiny_catalogue)
    curve = output["verify_curve"]
    assert list(curve) == [str(rows) for rows in range(1, 65)] and curve["1"] == 1.0, curve
    assert all(nu > 0 for nu in curve.values()) and output["verify_curve_step_ms"] > 0
    choice = specviz_json(
        "theory", "--tree-choice", "--acceptance-by-rank", "0.5,0.2", "--tau", "0.1", "--nu", "saved", "--pair", "tiny-pair",
        "--json", env=tiny_catalogue,
    )  # fmt: skip
    assert choice["max_rows"] == 64 and choice["verify_curve"] == curve and "tiny-pair" in choice["nu_source"]


def test_hardware_scores_alpha_when_the_weights_are_here():
    output = specviz_json("hardware", "--pair", "pycode-plain", "--repeats", "2", "--json")
    assert output["alpha_source"].startswith("scored") and 0 < output["alpha"] < 1
    assert output["target_parameters"] == stored_parameters(ASSETS / "pycode-target"), "the bundled target's own config.json"


def stored_parameters(folder) -> int:
    """Parameters in a folder's weights file (tied embeddings are stored once, as they are counted once)."""
    from safetensors import safe_open

    from specviz.models.stored import readable_folder  # a packed folder is read from its copy in specviz's cache

    with safe_open(str(readable_folder(folder) / "model.safetensors"), "pt") as weights:
        return sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())


@pytest.mark.parametrize(
    "args,complaint,status",
    [
        (["hardware", "--memory-gib", "0.0001"], "will not fit", 1),
        (["hardware", "--alpha", "1.5"], "alpha", 2),
        (["hardware", "--alpha", "x"], "alpha", 2),
        (["hardware", "--gamma", "0"], "γ", 2),
        (["hardware", "--rows", "65"], "--rows", 2),
        (["hardware", "--pair", "nope"], "unknown pair", 2),
        (["hardware", "--target", "tiny/target", "--draft", "some/unrecorded-model"], "No architecture recorded", 1),
    ],
)
def test_hardware_refusals_are_one_line(tiny_catalogue, args, complaint, status):
    result = specviz(*args, env=tiny_catalogue)
    assert result.returncode == status and "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and complaint in lines[0], result.stderr


def test_catalogue_folders_resolve_next_to_their_models_yaml(tmp_path):
    """SPECVIZ_CATALOGUE=/elsewhere/models.yaml with `target: models/t` means /elsewhere/models/t, wherever specviz runs."""
    from tests.local_models import save_model_folder

    save_model_folder(tmp_path / "models" / "t")
    (tmp_path / "models.yaml").write_text(
        "default: p\npairs:\n  p:\n    target: models/t\n    draft: ./models/t\n    description: relative folders\n"
    )
    catalogue = load_catalogue(tmp_path / "models.yaml")
    assert catalogue.get("p").target_ref == str(tmp_path / "models" / "t") and catalogue.get("p").bundled
    output = specviz_json(
        "run", "--prompt", "def", "--max-new-tokens", "4", "--json", env={"SPECVIZ_CATALOGUE": str(tmp_path / "models.yaml")}
    )
    assert len(output["new_token_ids"]) == 4


@pytest.mark.parametrize(
    "entry,complaint",
    [
        (
            "{family: mamba, hidden_size: 8, layers: 1, heads: 1, intermediate_size: 8, vocab_size: 8, tie_embeddings: true}",
            "family",
        ),
        (
            "{family: llama, hidden_size: 0, layers: 1, heads: 1, intermediate_size: 8, vocab_size: 8, tie_embeddings: true}",
            "hidden_size",
        ),
        ("{family: llama, hidden_size: 8, layers: 1, heads: 1, intermediate_size: 8, vocab_size: 8}", "tie_embeddings"),
        (
            "{family: llama, hidden_size: 8, layers: 1, heads: 1, intermediate_size: 8, vocab_size: 8, tie_embeddings: true, rope: 1}",
            "rope",
        ),
    ],
)
def test_a_malformed_architecture_is_named(tmp_path, entry, complaint):
    from specviz.models.catalogue import CatalogueError

    path = tmp_path / "models.yaml"
    path.write_text(f"default: p\npairs:\n  p: {{target: a/b, draft: a/c, description: d}}\narchitectures:\n  a/b: {entry}\n")
    with pytest.raises(CatalogueError, match=complaint):
        load_catalogue(path)
