"""How the bundle stores its models: packed weights unpack to the same bytes, a draft without its embedding loads
quietly and computes what it computed when transformers filled the gap, and the drafts read with their target's
tokenizer."""

from __future__ import annotations

import contextlib
import io
import logging
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as transformers_logging

from specviz.models.loading import load_model
from specviz.models.reduced_head import borrow_embeddings, mark_sharing
from specviz.models.stored import (
    PACKED,
    UNPACKED_FROM,
    WEIGHTS,
    has_own_tokenizer,
    pack_weights,
    readable_folder,
    unpack_weights,
    weights_file,
)
from tests.tiny import tiny_llama

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"


@contextlib.contextmanager
def everything_said():
    """What transformers would say at warning level, on stdout, stderr or its logger, collected as one string."""
    said, records = io.StringIO(), []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = transformers_logging.get_logger("transformers")
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_warning()
    logger.addHandler(handler)
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            yield lambda: said.getvalue() + "\n".join(records)
    finally:
        logger.removeHandler(handler)
        transformers_logging.set_verbosity(verbosity)


def test_packed_weights_unpack_to_the_same_bytes_and_again_when_the_pack_changes(tmp_path):
    (tmp_path / WEIGHTS).write_bytes(b"first weights" * 1000)
    pack_weights(tmp_path)
    (tmp_path / WEIGHTS).unlink()
    unpack_weights(tmp_path)
    assert (tmp_path / WEIGHTS).read_bytes() == b"first weights" * 1000

    (tmp_path / WEIGHTS).write_bytes(b"second weights" * 1000)  # a new pack, as training writes it
    pack_weights(tmp_path)
    (tmp_path / WEIGHTS).write_bytes(b"stale")  # an old unpacked file left behind ...
    (tmp_path / UNPACKED_FROM).write_text("the digest of an older pack\n")
    unpack_weights(tmp_path)  # ... is replaced, because it came from another pack
    assert (tmp_path / WEIGHTS).read_bytes() == b"second weights" * 1000
    assert not list(tmp_path.glob("*.partial"))


def test_any_weights_file_packed_is_read_from_its_copy_in_the_cache(tmp_path, monkeypatch):
    """A feature head's `feature_head.safetensors.xz` unpacks as a model's does: byte for byte, into the cache only."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "head"
    folder.mkdir()
    assert weights_file(folder, "feature_head.safetensors") == folder / "feature_head.safetensors"  # nothing packed
    (folder / "feature_head.safetensors").write_bytes(b"head weights" * 1000)
    pack_weights(folder, "feature_head.safetensors")
    (folder / "feature_head.safetensors").unlink()
    (folder / "feature_head.safetensors.unpacked-from").unlink()
    before = sorted(path.name for path in folder.iterdir())
    read = weights_file(folder, "feature_head.safetensors")
    assert read.is_relative_to(tmp_path / "cache" / "unpacked") and read.read_bytes() == b"head weights" * 1000
    assert weights_file(folder, "feature_head.safetensors") == read, "unpacked once"
    assert sorted(path.name for path in folder.iterdir()) == before, "nothing written beside the packed file"


def test_a_checkout_deleted_since_leaves_no_dangling_link_in_the_shared_copy(tmp_path, monkeypatch):
    """Two checkouts with the same packed weights share one unpacked copy; the folder's other files are linked into it.
    A read from the second, after the first was deleted (a clone in a temporary folder), finds its own files: the copy
    once linked the first's config.json, and every later load failed ("Unrecognized model ... model_type")."""
    import shutil

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "first" / "draft", tmp_path / "second" / "draft"
    first.mkdir(parents=True)
    (first / WEIGHTS).write_bytes(b"weights" * 1000)
    (first / "config.json").write_text('{"model_type": "llama"}')
    pack_weights(first)
    (first / WEIGHTS).unlink()
    (first / UNPACKED_FROM).unlink()
    shutil.copytree(first, second)
    assert (readable_folder(first) / "config.json").read_text() == '{"model_type": "llama"}'
    shutil.rmtree(first.parent)
    copy = readable_folder(second)
    assert (copy / "config.json").resolve() == (second / "config.json").resolve(), "linked to the checkout being read"
    assert (copy / WEIGHTS).read_bytes() == b"weights" * 1000 and not list(copy.glob("*.link"))


def test_every_bundled_weights_file_ships_packed():
    """Packed they keep the tracked tree under 60 MiB (the test below); each is read through `weights_file`."""
    for folder, name in [(draft, WEIGHTS) for draft in ("pycode-target", "pycode-draft", "pycode-draft-plain")] + [
        ("smollm2-135m-draft", WEIGHTS),
        ("smollm2-135m-eagle3", WEIGHTS),
        ("smollm2-135m-eagle", "feature_head.safetensors"),
    ]:
        assert (ASSETS / folder / f"{name}.xz").is_file(), f"assets/{folder} ships {name} unpacked"


def test_the_bundled_target_ships_packed_and_the_drafts_read_with_its_tokenizer(bundled_pair):
    assert (ASSETS / "pycode-target" / PACKED).is_file()
    assert has_own_tokenizer(str(ASSETS / "pycode-target"))
    for draft in ("pycode-draft", "pycode-draft-plain", "smollm2-135m-draft"):
        assert not has_own_tokenizer(str(ASSETS / draft)), f"{draft} ships a tokenizer; its target's is the one it reads"
    assert has_own_tokenizer("HuggingFaceTB/SmolLM2-135M-Instruct"), "a hub model brings its own"
    assert bundled_pair.tokenizer.get_vocab(), "the pair reads with the target's tokenizer"


def test_a_draft_without_its_embedding_loads_quietly_and_computes_as_before(tmp_path):
    target = tiny_llama(vocab_size=64, seed=0, hidden=32, layers=2)
    target.config.tie_word_embeddings = True
    draft = tiny_llama(vocab_size=64, seed=1, hidden=32, layers=1)
    draft.config.tie_word_embeddings = True
    own = {k: v for k, v in draft.state_dict().items() if "embed_tokens" not in k and "lm_head" not in k}
    draft.save_pretrained(tmp_path, state_dict=own)
    mark_sharing(tmp_path)

    with everything_said() as said:
        loaded = load_model(str(tmp_path), torch.device("cpu"), torch.float32, target=target).model
    assert "corrupted" not in said() and "MISSING" not in said(), said()
    assert loaded.get_input_embeddings().weight is target.get_input_embeddings().weight

    with everything_said() as said:  # the old way: transformers fills the embedding in, and warns
        before = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert "MISSING" in said(), "the check above would pass whatever happened: transformers no longer warns here"
    borrow_embeddings(before, target)
    ids = torch.tensor([[1, 5, 9, 63, 0, 17]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, before(ids).logits)


def test_loading_the_real_pair_says_nothing_about_missing_weights(real_pair):
    """`python app.py` and every command on the real pair used to open with transformers' "checkpoint seem corrupted"
    and a table of MISSING weights: the draft's embedding, which is the target's by design."""
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair

    catalogue = load_catalogue()
    with everything_said() as said:
        load_pair(real_pair.name, catalogue.get(real_pair.name), catalogue.offline_pairs())
    assert "corrupted" not in said() and "MISSING" not in said(), said()


def test_the_tracked_files_stay_under_60_mib():
    """A Space clones all of it: the bundle counts as git stores it (the packed weights, not the unpacked copy)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    files = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    total = sum(path.stat().st_size for path in files if path.is_file())
    assert total <= 60 * 2**20, f"the tracked files hold {total / 2**20:.1f} MiB; the limit is 60 MiB"


def test_a_draft_without_a_tokenizer_must_have_its_targets_vocabulary(tmp_path):
    """It reads with the target's tokenizer, so a draft over another vocabulary is refused, in one sentence."""
    from specviz.models.catalogue import Pair, PairError
    from specviz.models.loading import load_pair

    target, draft = tmp_path / "target", tmp_path / "draft"
    tiny_llama(vocab_size=4096, hidden=32, layers=1).save_pretrained(target)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (target / name).write_bytes((ASSETS / "pycode-target" / name).read_bytes())
    tiny_llama(vocab_size=2048, hidden=32, layers=1).save_pretrained(draft)
    with pytest.raises(PairError, match="no tokenizer of its own.*2,048 tokens.*4,096"):
        load_pair("mismatch", Pair(target=str(target), draft=str(draft), description="d"), [])
