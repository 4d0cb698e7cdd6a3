"""The model card beside a distilled draft, written from its distill_report.json (the one home of its numbers)."""

from __future__ import annotations

from pathlib import Path

from specviz.kernels import forms


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _fmt(value, spec: str, suffix: str = "") -> str:
    return "" if value is None else format(value, spec) + suffix


def _what_the_head_is(report: dict) -> str:
    draft, vocabulary = report["draft"], report["vocabulary"]
    shape = draft["shape"]
    return "\n".join(
        [
            f"- **A feature head (EAGLE-style)**: one decoder layer of the target's shape (width {shape['hidden']}, "
            f"{shape['heads']} query and {shape['kv_heads']} key/value heads, FFN {shape['ffn']:,}) behind a fusing layer "
            f"that reads the embedding of token x_i beside the target's last-layer feature f_(i-1); it predicts f_i and the "
            f"target's own head reads x_(i+1) out of it. {draft['parameters']:,} parameters of its own, "
            f"{draft.get('bytes', 0) / 1e6:.1f} MB; it started from the target's last layer.",
            "- **Borrowed, not shipped**: the embedding and the head rows are the target's, shared at load time.",
            *(
                [
                    f"- **Low rank**: each matrix is the target's own (layer {draft['low_rank']['layer']}, read back from "
                    "the target when the head loads) times a trained scale, plus a trained change of rank "
                    + ", ".join(f"{rank} ({name})" for name, rank in draft["low_rank"]["ranks"].items())
                    + "; the parameters above are the scales and the changes, which is all the folder holds."
                ]
                if draft.get("low_rank")
                else []
            ),
            f"- **Head over {vocabulary['head']:,} of {vocabulary['of']:,} tokens**, the ones the target writes most: they "
            f"cover {100 * vocabulary['answer_tokens_covered']:.2f} % of the answer tokens. q is 0 outside them; "
            "speculative decoding stays exact (the residual is taken over the whole vocabulary).",
        ]
    )


def _what_it_is(report: dict) -> str:
    if report["draft"].get("kind") == "feature":
        return _what_the_head_is(report)
    draft, vocabulary = report["draft"], report["vocabulary"]
    shape = draft["shape"]
    lines = [
        f"- **Architecture**: Llama, width {shape['hidden']}, {shape['heads']} heads, FFN {shape['ffn']:,}, "
        f"**{shape['layers']} layers**; {draft['parameters']:,} parameters of its own, {draft.get('bytes', 0) / 1e6:.1f} MB.",
    ]
    if shape.get("share_embeddings"):
        lines.append(
            "- **Borrowed, not shipped**: the input embedding and the tied head are the target's (EAGLE's design), "
            "shared at load time (`shares_target_embeddings.json`); it started from the target's first layers."
        )
    if vocabulary.get("kept") != "all":
        lines.append(
            f"- **Head over {vocabulary['head']:,} of {vocabulary['of']:,} tokens** (`draft_vocabulary.json`): they cover "
            f"{100 * vocabulary['answer_tokens_covered']:.2f} % of the answer tokens and "
            f"{100 * vocabulary['probability_mass_covered']:.2f} % of the target's top-k probability mass. q is 0 outside them; "
            "speculative decoding stays exact (the residual is taken over the whole vocabulary)."
        )
    lines.append("- **Tokenizer**: the target's (read from the target; this folder ships no tokenizer files).")
    return "\n".join(lines)


def _features(fit: dict) -> str:
    """How the target's features were had: one teacher-forced pass, or partly read from the work folder's shards."""
    computed, total = fit.get("features_computed_sequences"), fit["train_examples"] + fit["validation_examples"]
    how = f"{fit['features_dtype']}, {fit['features_s'] / 60:.1f} min"
    if computed is None or computed == total:
        return f"The target's features were recomputed from them in one teacher-forced pass ({how})."
    if computed == 0:
        return f"The target's features were read from the work folder, where an earlier run stored them ({how})."
    return (
        f"The target's features were recomputed in one teacher-forced pass over the {computed:,} sequences no earlier "
        f"run had stored ({how}); the other {total - computed:,} were read from the work folder."
    )


def _data(report: dict) -> str:
    data = report["data"]
    if report["draft"].get("kind") == "feature":
        return (
            f"The target's own greedy answers to {data['prompts']:,} prompts (chat template "
            f"{'applied' if data['chat_template'] else 'not applied'}), up to {data['max_new_tokens']} new tokens: "
            f"**{data['answer_tokens']:,} answer tokens**, read from `{data.get('source', 'collected')}` (the answers as token "
            f"ids, committed so any machine can retrain). {_features(report['fit'])}"
        )
    return (
        f"The target's own greedy answers to {data['prompts']:,} of {report.get('recipe_prompts', data['prompts']):,} prompts "
        f"(chat template {'applied' if data['chat_template'] else 'not applied'}), up to {data['max_new_tokens']} new tokens: "
        f"**{data['answer_tokens']:,} answer tokens**, {data['answers_ended_by_the_target']:,} answers ended by the target. "
        "At each answer token the target's top-32 probabilities were kept."
    )


def _log_rows(log: dict, keys: tuple[str, ...]) -> list[list[str]]:
    """One table row per validated step: the step, then the log's `keys` at that step to three decimals."""
    columns = zip(log["steps"], *(log[key] for key in keys))
    return [[str(step), *(f"{value:.3f}" for value in values)] for step, *values in columns]


def _training_the_head(report: dict) -> str:
    fit = report["fit"]
    settings, log = fit["settings"], fit["log"]
    rows = _log_rows(log, ("train_loss", "validation_agreement_first", "validation_agreement_second"))
    return (
        "At every answer position: cross-entropy on the token the target wrote, KL from the target's distribution over the "
        "kept tokens, and a smooth-L1 pull of the predicted feature towards the target's; a second unrolled step feeds the "
        f"head its own prediction, as drafting does (weight {settings['second_step_weight']}). AdamW, learning rate "
        f"{settings['learning_rate']:g}, {settings['warmup_steps']} warm-up steps, cosine decay, batches of "
        f"{settings['batch_size']} answers, **{settings['epochs']:g} epochs** ({log['steps'][-1]:,} steps), "
        f"{fit['seconds'] / 60:.1f} min on this machine; {fit['train_examples']:,} answers ({fit['train_tokens']:,} tokens with "
        f"their prompts) to train on, {fit['validation_examples']:,} held out. Greedy agreement with the target on the held-out "
        f"answers: **{fit['validation_agreement_first_draft']:.3f}** at the first draft of a window, "
        f"**{fit['validation_agreement_second_draft']:.3f}** at the second.\n\n"
        + _table(["step", "train loss", "agreement, 1st draft", "agreement, 2nd draft"], rows)
        + _continued(report.get("continued_from"))
    )


def _continued(earlier: dict | None) -> str:
    """Where a continued head started: the earlier run that trained it, in its own numbers."""
    if not earlier:
        return ""
    return (
        f"\n\nThis run continued a head trained before ({earlier['steps']:,} steps on {earlier['train_tokens']:,} tokens, "
        f"{earlier['seconds'] / 60:.1f} min, validation agreement {earlier['validation_agreement_first_draft']:.3f} at the "
        f"first draft), made by\n\n```bash\n{earlier['command']}\n```\n\nIts validation answers were drawn afresh, so some "
        "may be answers the earlier run trained on: the α measured on held-out questions below is the clean number."
    )


def _training(report: dict) -> str:
    if report["draft"].get("kind") == "feature":
        return _training_the_head(report)
    fit = report["fit"]
    settings, log = fit["settings"], fit["log"]
    rows = _log_rows(log, ("train_loss", "validation_loss", "validation_agreement"))
    return (
        f"Cross-entropy of q against the target's top-k plus {settings['greedy_weight']} × cross-entropy on the token the "
        f"target wrote; AdamW, learning rate {settings['learning_rate']:g}, {settings['warmup_steps']} warm-up steps, cosine "
        f"to a tenth, batches of {settings['batch_size']} answers, **{settings['steps']:,} steps**, "
        f"{fit['seconds'] / 60:.1f} min; {fit['train_examples']:,} answers to train on, {fit['validation_examples']:,} held out. "
        f"The best validated weights were kept: greedy agreement **{fit['best_validation_greedy_agreement']:.3f}** "
        "(how often the draft's top token is the target's, at positions of the target's own answers).\n\n"
        + _table(["step", "train loss", "validation loss", "greedy agreement (validation)"], rows)
    )


def _weights(measured: dict) -> str:
    """The form the target (and the head) ran in while measured: a weight-only form, else the dtype."""
    weights = measured.get("weights")
    if weights in (None, "as loaded"):
        return measured["dtype"]
    if not forms.get(weights).packs:
        return weights
    head = measured.get("head_weights")
    kind = " weight-only" if forms.get(weights).weight_only else ""
    return f"the target in {weights}{kind}" + (f", the head in {head}" if head and head != "as trained" else "")


def _measured(report: dict) -> str:
    measured = report.get("measured")
    if not measured:
        return "Not measured (the run skipped `--measure-prompts`)."
    rows = []
    for row in measured["rows"]:
        alone = row["method"] == "autoregressive"
        rows.append(
            [
                "target alone" if alone else "speculative",
                "—" if alone else str(row["gamma"]),
                _fmt(row["tokens_per_s"], ".1f"),
                _fmt(row["speedup"], ".2f", "×"),
                _fmt(row["decode_speedup"], ".2f", "×"),
                _fmt(row["alpha"], ".3f"),
                _fmt(row["tau"], ".3f"),
                _fmt(row["verify_cost"], ".2f"),
                _fmt(row["tokens_per_cycle"], ".2f"),
            ]
        )
    identical = {True: "identical to the target alone", False: "not all identical to the target alone", None: ""}
    text = (
        f"On {measured['prompts']} held-out prompts, greedy, {measured['max_new_tokens']} new tokens, {_weights(measured)} on "
        f"{measured['device']}, measured by `bench`'s own code ({measured['seconds']:.0f} s); outputs "
        f"{identical[measured['greedy_identical']]}. τ is a draft step over a target step and ν a verify pass over a target "
        "step, both measured in the same run.\n\n"
        + _table(["method", "γ", "tokens/s", "speedup (end to end)", "decode speedup", "α", "τ", "ν", "tokens / cycle"], rows)
    )
    by_position = {
        id(row): row.get("conditional_acceptance_rate_per_pos", row.get("acceptance_by_position")) for row in measured["rows"]
    }
    if any(by_position.values()):
        text += (
            "\n\nα by position in the window, given the drafts before it were accepted (the first draft, the second, …): "
            + "; ".join(
                f"γ = {row['gamma']}: " + ", ".join(_fmt(rate, ".2f") or "–" for rate in by_position[id(row)])
                for row in measured["rows"]
                if by_position[id(row)]
            )
        )
    if measured.get("command"):
        text += f"\n\nRe-measured by\n\n```bash\n{measured['command']}\n```"
    for sample in measured.get("samples", []):
        text += f"\n\n**Prompt:** {sample['prompt']}\n\n> " + sample["answer"].strip().replace("\n", "\n> ")
    return text


def model_card(report: dict, name: str) -> str:
    """The card's markdown: what the draft is, its data, its training and its measured numbers, all from `report`."""
    command = report.get("command")
    made_by = f"\n\nMade by\n\n```bash\n{command}\n```" if command else ""
    sections = [
        f"# {name}: a {'feature head' if report['draft'].get('kind') == 'feature' else 'draft'} distilled by specviz for "
        f"{report['target']}{made_by}\n\n"
        "Every number below comes from `distill_report.json`, written by the same run.",
        "## What it is\n\n" + _what_it_is(report),
        "## Data\n\n" + _data(report),
        "## Training\n\n" + _training(report),
        "## Measured\n\n" + _measured(report),
    ]
    return "\n\n".join(sections) + "\n"


def write_card(folder: Path, report: dict) -> None:
    (folder / "MODEL_CARD.md").write_text(model_card(report, folder.name))
