"""Each model is read once per process (issue 43: the app's log showed the real pair's weights loaded 4 times).

The app read every model twice, to time a warm reload after the first load (serving/pair_cache.pair_load_times), and
again for every other pair that names it: the two bundled pycode pairs share a target, the two SmolLM2 pairs a target
and a draft. Now pairs share what is already in memory (models/loading.shelved) and the app times the first load
only. A compile worker (serving/compile_worker.py) still loads its own copy: a separate process, not counted here.
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter
from pathlib import Path

import pytest

from specviz.models import loading
from specviz.serving import pair_cache


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """Every model read from its files in this process, by folder name; the app's model cache emptied first."""
    counted: Counter = Counter()
    read_model = loading.read_model

    def counting(reference: str, dtype):
        counted[Path(reference).name] += 1
        return read_model(reference, dtype)

    monkeypatch.setattr(loading, "read_model", counting)
    for name, empty in (("_loaded", type(pair_cache._loaded)()), ("_loading", {}), ("_load_s", {}), ("_status", {})):
        monkeypatch.setattr(pair_cache, name, empty)
    monkeypatch.setattr(pair_cache, "_shelf", weakref.WeakValueDictionary())
    monkeypatch.setattr(pair_cache, "_budget_bytes", None)
    return counted


def test_two_bundled_pairs_share_their_target_and_read_each_model_once(reads):
    distilled = pair_cache.get_pair("pycode-distilled")
    plain = pair_cache.get_pair("pycode-plain")
    assert reads == {"pycode-target": 1, "pycode-draft": 1, "pycode-draft-plain": 1}, (
        f"each folder read once, however many pairs name it: {dict(reads)}"
    )
    assert plain.target is distilled.target, "the second pair takes the target the first one loaded"
    assert plain.draft is not distilled.draft, "each pair keeps its own draft"
    times = pair_cache.pair_info(plain).model_load_s
    assert times["target"]["cold_s"] == distilled.target.load_s and times["target"].get("warm_s") is None, (
        "the app reports each model's first load in this process and times no second one"
    )


def test_shared_weights_count_once_against_the_budget(reads):
    distilled = pair_cache.get_pair("pycode-distilled")
    plain = pair_cache.get_pair("pycode-plain")
    target, drafts = distilled.target.weight_bytes, distilled.draft.weight_bytes + plain.draft.weight_bytes
    assert pair_cache.weight_bytes([distilled, plain]) == target + drafts, "the shared target counts once"


def test_a_model_no_pair_holds_leaves_the_shelf():
    class Model:  # a LoadedModel stand-in (weakly referenced, as the app's shelf holds them)
        pass

    shelf = weakref.WeakValueDictionary()
    made = []
    load = lambda: made.append(Model()) or made[-1]  # noqa: E731
    first = loading.shelved(shelf, ("target", "x"), load)
    assert loading.shelved(shelf, ("target", "x"), load) is first and len(made) == 1
    made.clear()
    del first
    assert ("target", "x") not in shelf, "an evicted pair's models are freed, not kept by the shelf"


@pytest.mark.slow
def test_the_apps_start_reads_each_model_once(reads):
    """What `python app.py` loads at start (the default pair, then the real pairs in the background), as app.py asks
    for it: every folder read once. Each SmolLM2 pair names the same target and draft."""
    from specviz.ui.choices import background_pairs

    real = background_pairs()
    if not real:
        pytest.skip("no real pair reaches this machine (SPECVIZ_BACKGROUND_PAIRS=0, or none preloads)")
    failed: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        said = lambda message, *args, **_: failed.append(f"{message % args}: {sys.exc_info()[1]}")  # noqa: E731
        patch.setattr(pair_cache.log, "exception", said)
        pair_cache.preload(pair_cache.catalogue().default, then=real).join(timeout=1800)
    assert not failed, failed
    assert set(pair_cache.loaded_names()) == {pair_cache.catalogue().default, *real}
    assert reads and set(reads.values()) == {1}, f"each model read once at start: {dict(reads)}"
