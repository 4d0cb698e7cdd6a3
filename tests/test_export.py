"""`export --format eagle3`: the checkpoint other engines load, read back with plain json + safetensors, and the
refusals, on tiny random heads (nothing downloaded, nothing built; tests/test_export_llama_cpp.py has the real head)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from specviz.cli import main
from specviz.deployment.engine_commands import engine_commands
from specviz.deployment.export import ExportError, export_eagle3
from specviz.engine.tree_shape import TreeShape
from specviz.models.catalogue import load_catalogue
from tests.eagle3_heads import random_eagle3_head

ROOT = Path(__file__).resolve().parent.parent


def tiny_target(folder: Path, vocab: int = 96, hidden: int = 32, layers: int = 8, tied: bool = True) -> Path:
    """A Llama target's config.json and its embedding (and, untied, its LM head): all an export reads of a target."""
    folder.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": layers,
        "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {"model.embed_tokens.weight": torch.randn(vocab, hidden)}
    if not tied:
        tensors["lm_head.weight"] = torch.randn(vocab, hidden)
    save_file(tensors, folder / "model.safetensors")
    return folder


def test_an_export_reads_back_as_eagle3_with_the_targets_rows_as_its_lm_head(tmp_path):
    target = tiny_target(tmp_path / "target")
    draft_ids = [1, 2, 5, 9, 40, 95]
    head = random_eagle3_head(target, tmp_path / "stored", draft_ids, lm_head=False)
    written = export_eagle3(head, target, tmp_path / "out")

    config = json.loads((written.head / "config.json").read_text())  # what llama.cpp's converter reads
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    assert config["draft_vocab_size"] == len(draft_ids) and config["vocab_size"] == 96
    assert config["target_hidden_size"] == 32 and config["tie_word_embeddings"] is False
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5], "the engines' default for 8 layers: 2, L/2, L−3"
    assert "eagle_config" not in config, "default ids are left to SGLang's own default, never written shifted"

    tensors = load_file(written.head / "model.safetensors")
    embedding = load_file(target / "model.safetensors")["model.embed_tokens.weight"]
    assert torch.equal(tensors["lm_head.weight"], embedding[draft_ids]), "a borrowed LM head ships as the target's rows"
    assert tensors["d2t"].dtype == torch.int64
    assert (torch.arange(len(draft_ids)) + tensors["d2t"]).tolist() == draft_ids, "d2t holds offsets: id + d2t[id]"
    assert tensors["t2d"].dtype == torch.bool and tensors["t2d"].nonzero().flatten().tolist() == draft_ids
    assert tensors["midlayer.self_attn.q_proj.weight"].shape == (32, 64), "q, k, v read cat(embedding, hidden)"
    assert tensors["fc.weight"].shape == (32, 96), "fc reads three target hidden states"
    assert not any(name.startswith("embed_tokens") for name in tensors), "the embedding is the target's, never shipped"
    assert written.target.resolve() == target.resolve()


def test_an_untied_targets_head_ships_the_targets_lm_head_rows_not_its_embeddings(tmp_path):
    target = tiny_target(tmp_path / "target", tied=False)  # Qwen2.5-Coder-1.5B's case
    draft_ids = [1, 2, 5, 9, 40, 95]
    head = random_eagle3_head(target, tmp_path / "stored", draft_ids, lm_head=False)
    written = export_eagle3(head, target, tmp_path / "out")
    stored = load_file(target / "model.safetensors")
    exported = load_file(written.head / "model.safetensors")["lm_head.weight"]
    assert torch.equal(exported, stored["lm_head.weight"][draft_ids])
    assert not torch.equal(exported, stored["model.embed_tokens.weight"][draft_ids])


def test_ids_other_than_the_default_are_written_for_sglang_one_lower(tmp_path):
    target = tiny_target(tmp_path / "target")
    head = random_eagle3_head(target, tmp_path / "stored", list(range(96)), layer_ids=[1, 3, 7])
    config = export_eagle3(head, target, tmp_path / "out").config
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 3, 7]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 6], "SGLang adds 1 to what it reads"


@pytest.mark.parametrize("layer_ids, complaint", [([1, 3], "exactly three"), ([0, 3, 7], "ids 1"), ([1, 3, 8], "ids 1")])
def test_layer_ids_no_engine_can_read_are_refused(tmp_path, layer_ids, complaint):
    target = tiny_target(tmp_path / "target")
    head = random_eagle3_head(target, tmp_path / "stored", list(range(96)), layer_ids=layer_ids)
    with pytest.raises(ExportError, match=complaint):
        export_eagle3(head, target, tmp_path / "out")


def test_a_head_missing_eagle3_tensors_is_refused_in_one_sentence(tmp_path):
    target = tiny_target(tmp_path / "target")
    head = random_eagle3_head(target, tmp_path / "stored", list(range(96)))
    tensors = load_file(head / "model.safetensors")
    del tensors["midlayer.hidden_norm.weight"]
    save_file(tensors, head / "model.safetensors")
    with pytest.raises(ExportError, match="not a head in EAGLE-3's form .*hidden_norm"):
        export_eagle3(head, target, tmp_path / "out")


def one_line_refusal(capsys, *args: str) -> str:
    assert main(list(args)) == 2
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(said) == 1, said
    return said[0]


def test_export_refuses_a_pair_without_a_head_and_a_head_not_in_eagle3s_form(capsys, tmp_path):
    no_head = one_line_refusal(capsys, "export", "--pair", "pycode-distilled", "--out", str(tmp_path / "a"))
    assert "pycode-distilled pair has no head to export" in no_head
    old_head = one_line_refusal(
        capsys,
        "export",
        "--pair",
        "smollm2-135m-distilled",
        "--head",
        str(ROOT / "assets/smollm2-135m-eagle"),
        "--out",
        str(tmp_path / "b"),
    )
    assert "not EAGLE-3's form" in old_head and "distill" in old_head
    feature_only = one_line_refusal(  # the coder pair's head is a feature head: refused before its weights are fetched
        capsys, "export", "--pair", "qwen2.5-coder-0.5b-1.5b", "--out", str(tmp_path / "e")
    )
    assert "has no head to export in EAGLE-3's form" in feature_only and "feature head" in feature_only
    assert "--init-head assets/qwen2.5-coder-1.5b-head" in feature_only and "--head" in feature_only
    assert "--gamma" in one_line_refusal(
        capsys, "export", "--pair", "pycode-distilled", "--out", str(tmp_path / "c"), "--gamma", "0"
    )
    assert "names no tree" in one_line_refusal(
        capsys, "export", "--pair", "pycode-plain", "--out", str(tmp_path / "d"), "--tree", "default"
    )
    assert not any((tmp_path / name).exists() for name in "abcde"), "a refusal writes nothing"


def test_export_of_the_bundled_target_prints_the_three_commands(capsys, tmp_path):
    config = json.loads((ROOT / "assets/pycode-target/config.json").read_text())
    head = random_eagle3_head(ROOT / "assets/pycode-target", tmp_path / "stored", list(range(0, config["vocab_size"], 4)))
    out = tmp_path / "export"
    assert main(["export", "--pair", "pycode-distilled", "--head", str(head), "--out", str(out), "--gamma", "3", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert (out / "head" / "model.safetensors").is_file() and (out / "target" / "config.json").is_file()
    commands = said["commands"]
    assert commands["gamma"] == 3
    assert "--target-model-dir" in commands["llama_cpp"][-2] and "--spec-draft-n-max 3" in commands["llama_cpp"][-1]
    assert commands["llama_cpp"][0].startswith("python convert_hf_to_gguf.py"), "a target without a GGUF is converted first"


def test_the_commands_ask_each_engine_for_the_chain_or_tree_specviz_chose():
    chain = engine_commands("out/head", "out/target", "target.gguf", gamma=2)
    assert chain.llama_cpp[-1].startswith("llama-server -m target.gguf -md out/head.gguf --spec-type draft-eagle3")
    assert "--spec-draft-n-max 2" in chain.llama_cpp[-1]
    vllm = shlex.split(chain.vllm[0])
    assert json.loads(vllm[vllm.index("--speculative-config") + 1]) == {
        "method": "eagle3",
        "model": "out/head",
        "num_speculative_tokens": 2,
    }
    assert "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3" in chain.sglang[0]
    tree = engine_commands("out/head", "out/target", "target.gguf", gamma=1, tree=TreeShape.parse("2x1:1"))
    assert "--speculative-num-steps 2 --speculative-eagle-topk 2 --speculative-num-draft-tokens 4" in tree.sglang[0]
    assert "--spec-draft-n-max 1" in tree.llama_cpp[-1], "llama.cpp and vLLM draft the chain"


def test_the_deployment_report_shows_the_same_commands_and_keeps_them_through_json():
    from dataclasses import replace

    from specviz.deployment.report import DeploymentReport, render_html
    from tests.test_deployment_report import sample_report

    commands = engine_commands("eagle3-export/head", "eagle3-export/target", "t.gguf", gamma=2).to_json()
    report = replace(sample_report(), engine_commands=commands)
    assert DeploymentReport.from_json(report.to_json()) == report
    page = render_html(report)
    section = page[page.index("<h2>Run it in llama.cpp, vLLM or SGLang") :]
    assert "--spec-draft-n-max 2" in section and "--speculative-algorithm EAGLE3" in section and "K = 2" in section
    assert "Run it in llama.cpp" not in render_html(sample_report()), "a pair without an EAGLE-3 head gets no commands"


@pytest.mark.parametrize(
    "name",
    [
        "eagle3_llama_cpp.json",
        "eagle3_llama_cpp_coder.json",
        "eagle3_llama_cpp_coder_q8.json",
        "eagle3_llama_cpp_coder_no_repack.json",
    ],
)
def test_the_production_page_shows_the_benchmarks_results_file(name):
    """docs/production.md's tables are benchmarks/results/eagle3_llama_cpp*.json as the benchmark renders them: one home."""
    page = (ROOT / "docs" / "production.md").read_text()
    block = page.split(f"<!-- {name} -->\n")[1].split(f"\n<!-- /{name} -->")[0]
    results = ROOT / "benchmarks" / "results" / name
    if not results.is_file():
        assert block.startswith("Not measured yet"), "a table without its results file"
        return
    from benchmarks.eagle3_llama_cpp import markdown_table

    rendered = markdown_table(json.loads(results.read_text()))
    assert block == rendered, "rerun `python benchmarks/eagle3_llama_cpp.py --table` and paste it into docs/production.md"


def test_the_report_offers_commands_only_for_an_eagle3_head_and_sglang_the_tree_that_ran_faster(monkeypatch):
    from types import SimpleNamespace

    from specviz.deployment import collect, export

    timed = lambda rate: SimpleNamespace(pooled=SimpleNamespace(tokens_per_s=rate))  # noqa: E731
    requests = SimpleNamespace(speculative=timed(100.0), trees={"2x1:1": timed(120.0), "3x1:1": timed(90.0)})
    assert collect.head_commands("pycode-distilled", 4, requests, None) is None, "no head: no commands"
    real = load_catalogue().get("smollm2-135m-distilled")
    has_eagle3_head = export.exportable_head("smollm2-135m-distilled", real) is not None
    assert (collect.head_commands("smollm2-135m-distilled", 1, requests, None) is not None) == has_eagle3_head
    monkeypatch.setattr(export, "exportable_head", lambda name, entry: Path("assets/some-eagle3-head"))
    commands = collect.head_commands("smollm2-135m-distilled", 1, requests, None)
    assert (
        commands["llama_cpp"][0] == "python -m specviz export --pair smollm2-135m-distilled --format eagle3 --out eagle3-export"
    )
    assert commands["gamma"] == 1 and commands["tree"] == "2x1:1", "SGLang drafts the tree that ran faster than the chain"
    assert "SmolLM2-135M-Instruct.Q4_1.gguf -md eagle3-export/head.gguf" in commands["llama_cpp"][-1]


@pytest.mark.parametrize("pair", ["smollm2-135m-distilled", "qwen2.5-coder-0.5b-1.5b"])
def test_the_target_gguf_llama_cpp_reads_is_where_the_pairs_offline_source_keeps_it(pair):
    """One wheel's file (SmolLM2) or a GGUF assembled from parts across wheels (the coder target): both in the cache."""
    from specviz.deployment.export import target_gguf_path
    from specviz.models.sources import cache_root

    entry = load_catalogue().get(pair)
    path = Path(target_gguf_path(entry))
    assert path.parent == cache_root() / "wheels" / entry.target_offline.sha256[:16] and path.suffix == ".gguf"
