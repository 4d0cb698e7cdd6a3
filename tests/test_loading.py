"""Loading pairs: shared tokenizers required, padded vocabularies cut, unreachable models explained at once."""

import socket

import pytest

from specviz.engine import DecodeSettings
from specviz.models.catalogue import Pair
from specviz.models.loading import PairError, choose_dtype, load_pair
from specviz.run.runner import PromptError, run
from tests.local_models import save_model_folder


def local_pair(target, draft) -> Pair:
    return Pair(target=str(target), draft=str(draft), description="test")


def test_mismatched_tokenizers_are_refused_naming_both(tmp_path):
    target = save_model_folder(tmp_path / "target", corpus="a")
    draft = save_model_folder(tmp_path / "draft", corpus="b")
    with pytest.raises(PairError, match="different tokenizers") as error:
        load_pair("mixed", local_pair(target, draft), [])
    assert str(target) in str(error.value) and str(draft) in str(error.value)


def test_padded_vocabularies_share_the_shorter_length(tmp_path):
    target = save_model_folder(tmp_path / "target", vocab_pad=0)
    draft = save_model_folder(tmp_path / "draft", vocab_pad=24, seed=1)
    pair = load_pair("padded", local_pair(target, draft), [])
    assert pair.shared_vocab_size == pair.target.model.config.vocab_size < pair.draft.model.config.vocab_size
    greedy = DecodeSettings(max_new_tokens=12, gamma=3)
    speculative = list(run(pair, "def add(", greedy))[-1].new_token_ids
    baseline = list(run(pair, "def add(", greedy, mode="autoregressive"))[-1].new_token_ids
    assert speculative == baseline


def test_unreachable_hub_model_gets_one_sentence_without_trying_the_network(monkeypatch):
    """An offline machine is told at once: no connection is even attempted, so no network time-out is waited for."""
    attempts = []

    def no_network(*args, **kwargs):
        attempts.append(args)
        raise OSError("this test allows no network")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    with pytest.raises(PairError) as error:
        load_pair(
            "hub",
            Pair(target="nobody/not-a-cached-model-7b", draft="nobody/not-a-cached-model-1b", description="x"),
            ["pycode-distilled"],
        )
    message = str(error.value)
    assert "nobody/not-a-cached-model-7b" in message and "unreachable" in message and "pycode-distilled" in message
    assert "\n" not in message
    assert attempts == [], f"with HF_HUB_OFFLINE=1 loading must not try the network, it tried {attempts}"


def test_missing_local_folder_is_named(tmp_path):
    with pytest.raises(PairError, match="does not exist"):
        load_pair("gone", local_pair(tmp_path / "nope-target", tmp_path / "nope-draft"), [])


def test_prompt_limits(tmp_path):
    folder = save_model_folder(tmp_path / "m")
    pair = load_pair("self", local_pair(folder, folder), [])
    with pytest.raises(PromptError, match="empty"):
        list(run(pair, "  \n", DecodeSettings()))
    with pytest.raises(PromptError, match="context"):
        list(run(pair, "def add(a, b): " * 200, DecodeSettings(max_new_tokens=64)))


def test_dtype_choice_per_device():
    import torch

    assert choose_dtype(torch.device("cpu")) == torch.float32
    assert choose_dtype(torch.device("cpu"), "bfloat16") == torch.bfloat16
