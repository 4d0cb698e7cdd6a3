"""The real pair's EAGLE-3 head, exported by `python -m specviz export`, read back by an independent reader (plain json and
safetensors: names, shapes, dtypes, the config keys llama.cpp's converter reads); and, where the benchmark's llama.cpp
build is in specviz's cache, converted by llama.cpp's own converter and run: llama.cpp must accept its drafts, and a
random head must draft in llama.cpp the tokens specviz's module drafts (the same layers, norms, positions, vocabulary).

Slow: it fetches the real target. Nothing here builds llama.cpp (benchmarks/eagle3_llama_cpp.py does, once).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from safetensors import safe_open

from specviz.models.sources import cache_root
from tests.test_cli import specviz

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
HEAD = ROOT / "assets" / "smollm2-135m-eagle3"
PAIR = "smollm2-135m-distilled"
LAYER = [
    "input_layernorm",
    "hidden_norm",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "post_attention_layernorm",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
]
LLAMA_CPP_BIN = cache_root() / "llama.cpp" / "build" / "bin"
needs_llama_cpp = pytest.mark.skipif(
    not (LLAMA_CPP_BIN / "llama-speculative-simple").is_file(),
    reason="llama.cpp is not built in specviz's cache (python benchmarks/eagle3_llama_cpp.py builds it)",
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """`export --json` of the real pair's head into a fresh folder, and what it printed."""
    if not HEAD.is_dir():
        if os.environ.get("SPECVIZ_REQUIRE_REAL_MODEL") == "1":
            pytest.fail(f"the EAGLE-3 head {HEAD} is missing")
        pytest.skip(f"no EAGLE-3 head at {HEAD} yet (`distill --kind eagle3` makes it)")
    out = tmp_path_factory.mktemp("eagle3") / "export"
    result = specviz("export", "--pair", PAIR, "--head", str(HEAD), "--out", str(out), "--gamma", "1", "--json", timeout=900)
    assert result.returncode == 0, result.stderr
    return out, json.loads(result.stdout)


def test_the_export_reads_back_as_an_eagle3_checkpoint(exported):
    out, printed = exported
    config = json.loads((out / "head" / "config.json").read_text())
    target = json.loads((out / "target" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"], "a name llama.cpp, vLLM and SGLang all register"
    assert config["num_hidden_layers"] == 1 and "draft_vocab_size" in config, "how llama.cpp's converter detects EAGLE-3"
    ids = config["eagle_aux_hidden_state_layer_ids"]
    assert len(ids) == 3 and all(0 < k < target["num_hidden_layers"] for k in ids), ids
    assert config["target_hidden_size"] == target["hidden_size"] == config["hidden_size"]
    assert config["vocab_size"] == target["vocab_size"] and config["tie_word_embeddings"] is False
    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "rms_norm_eps", "rope_theta"):
        assert key in config, f"{key} is read by every loader"
    assert (out / "target" / "tokenizer.json").is_file(), "llama.cpp's converter takes the tokenizer from the target"

    hidden, vocab, draft = config["hidden_size"], config["vocab_size"], config["draft_vocab_size"]
    head_dim = config["head_dim"]
    q, kv = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    ffn = config["intermediate_size"]
    expected = {
        "fc.weight": (hidden, 3 * config["target_hidden_size"]),
        "midlayer.input_layernorm.weight": (hidden,),
        "midlayer.hidden_norm.weight": (hidden,),
        "midlayer.self_attn.q_proj.weight": (q, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": (hidden, q),
        "midlayer.post_attention_layernorm.weight": (hidden,),
        "midlayer.mlp.gate_proj.weight": (ffn, hidden),
        "midlayer.mlp.up_proj.weight": (ffn, hidden),
        "midlayer.mlp.down_proj.weight": (hidden, ffn),
        "norm.weight": (hidden,),
        "lm_head.weight": (draft, hidden),
        "d2t": (draft,),
        "t2d": (vocab,),
    }
    with safe_open(out / "head" / "model.safetensors", framework="numpy") as weights:
        assert set(weights.keys()) == set(expected), "exactly EAGLE-3's tensors: no embedding, nothing of specviz's own"
        for name, shape in expected.items():
            assert weights.get_slice(name).get_shape() == list(shape), name
        dtypes = {name: weights.get_slice(name).get_dtype() for name in expected}  # the header's names (numpy has no bf16)
        d2t, t2d = weights.get_tensor("d2t"), weights.get_tensor("t2d")
    assert dtypes["d2t"] == "I64" and dtypes["t2d"] == "BOOL"
    assert {dtypes[name] for name in expected if name not in ("d2t", "t2d")} <= {"F32", "F16", "BF16"}
    target_ids = d2t + range(draft)
    assert target_ids.min() >= 0 and target_ids.max() < vocab and len(set(target_ids.tolist())) == draft
    assert sorted(target_ids.tolist()) == t2d.nonzero()[0].tolist(), "t2d marks exactly the ids d2t maps to"
    assert printed["commands"]["gamma"] == 1


@needs_llama_cpp
def test_llama_cpp_converts_the_export_and_accepts_its_drafts(exported, tmp_path):
    from benchmarks.eagle3_llama_cpp import convert_head, llama_cpp_speculative
    from benchmarks.llama_cpp_side_by_side import llama_cpp_source
    from specviz.prompts.sets import CHAT_HELDOUT

    out, printed = exported
    head_gguf = convert_head(llama_cpp_source(), out / "head", out / "target", tmp_path / "head.gguf")
    target_gguf = printed["commands"]["llama_cpp"][-1].split(" -m ", 1)[1].split()[0]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out / "target")
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": CHAT_HELDOUT[0]}], add_generation_prompt=True, tokenize=False
    )
    run = llama_cpp_speculative(LLAMA_CPP_BIN / "llama-speculative-simple", Path(target_gguf), head_gguf, text, 1, 64, 2)
    assert run.drafted > 0, "llama.cpp loaded the head but drafted nothing"
    assert run.accepted > 0, f"llama.cpp accepted none of the head's {run.drafted} drafts: the layers, norm or vocabulary differ"


@needs_llama_cpp
def test_a_random_head_drafts_the_same_tokens_in_llama_cpp_as_in_specviz(tmp_path):
    """Untrained, so nothing is accepted and every cycle drafts from the target's own states: llama.cpp's draft (its
    -v log) against specviz's Eagle3Head over the same tokens, teacher-forced. A wrong layer id, norm, residual,
    position or d2t would make them differ everywhere; the Q4_1 kernels' rounding may flip a few."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.eagle3_llama_cpp import convert_head, speculative_command
    from benchmarks.llama_cpp_side_by_side import llama_cpp_source
    from specviz.cli.export import target_files
    from specviz.deployment.export import export_eagle3
    from specviz.models.catalogue import load_catalogue
    from specviz.models.eagle3_head import Eagle3Head, Eagle3Shape, save_head
    from specviz.prompts.sets import CHAT_HELDOUT

    target_dir, target_gguf = target_files(load_catalogue().get(PAIR))
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    kept = list(range(0, model.config.vocab_size, 2))
    shape = Eagle3Shape.of_target(model.config, len(kept))
    head = Eagle3Head(shape, model.get_input_embeddings().weight.detach(), kept)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in head.named_parameters():
            if weight.dim() == 2:  # a wide lm_head: decisive argmaxes, so rounding seldom flips one
                scale = 1.0 if name.startswith("lm_head") else weight.shape[1] ** -0.5
                weight.copy_(torch.randn(weight.shape, generator=generator) * scale)
    save_head(head, tmp_path / "stored", dtype=torch.float32)
    exported = export_eagle3(tmp_path / "stored", target_dir, tmp_path / "export")
    # f32: llama.cpp's f32 kernels keep the activations unrounded, as specviz's float32 reference does
    head_gguf = convert_head(llama_cpp_source(), exported.head, exported.target, tmp_path / "head.gguf", outtype="f32")

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": CHAT_HELDOUT[0]}], add_generation_prompt=True, tokenize=False
    )
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    command = speculative_command(LLAMA_CPP_BIN / "llama-speculative-simple", Path(target_gguf), head_gguf, text, 1, 40, 2)
    log = subprocess.run([*command, "-v"], capture_output=True, text=True, check=True).stderr
    drafted = [int(token) for token in re.findall(r"draft candidate\s+0, pos\s+0:\s+(\d+)", log)]
    emitted = [int(token) for token in re.findall(r"the last target token is: \((\d+)\)", log)]
    assert len(drafted) >= 30 and len(emitted) == len(drafted), "one draft and one target token per cycle, K = 1"

    sequence = prompt + emitted
    with torch.no_grad():
        states = model(torch.tensor([sequence]), output_hidden_states=True).hidden_states
        features = torch.cat([states[k] for k in shape.aux_layers], dim=-1)
        outputs, _ = head(torch.tensor([sequence[1:]]), features[:, :-1])  # (x_{i+1}, features at i) at position i
        ours = head.logits(outputs)[0].argmax(-1)[len(prompt) - 2 :][: len(drafted)].tolist()
    same = sum(a == b for a, b in zip(drafted, ours))
    assert same >= 0.9 * len(drafted), f"llama.cpp drafted {drafted[:8]}…, specviz {ours[:8]}…: {same}/{len(drafted)} agree"
