"""The model cache keeps pairs within a memory budget, evicting the least recently used."""

from types import SimpleNamespace

import pytest

from specviz.models import loading
from specviz.serving import pair_cache


def fake_pair(name: str, megabytes: int) -> SimpleNamespace:
    model = SimpleNamespace(weight_bytes=megabytes * 2**20, load_s=0.1)
    draft = SimpleNamespace(weight_bytes=0, load_s=0.1)
    return SimpleNamespace(name=name, target=model, draft=draft, feature_head=None)


@pytest.fixture
def cache(monkeypatch):
    sizes = {"a": 40, "b": 40, "c": 40, "big": 200}
    loads = []

    def load_pair(name, pair, offline_pairs, progress=None, **_):
        loads.append(name)
        progress(f"Loading {name}…")
        return fake_pair(name, sizes[name])

    monkeypatch.setattr(loading, "load_pair", load_pair)
    monkeypatch.setattr(pair_cache, "warm_up", lambda pair: None)
    monkeypatch.setattr(pair_cache, "catalogue", lambda: SimpleNamespace(get=lambda name: None, offline_pairs=lambda: []))
    monkeypatch.setattr(pair_cache, "_loaded", type(pair_cache._loaded)())
    monkeypatch.setattr(pair_cache, "_budget_bytes", 100 * 2**20)
    return loads


def test_least_recently_used_pair_is_evicted_over_budget(cache):
    pair_cache.get_pair("a")
    pair_cache.get_pair("b")
    pair_cache.get_pair("a")  # a is now the most recently used
    pair_cache.get_pair("c")  # 120 MB > 100 MB: b goes
    assert pair_cache.loaded_names() == ["a", "c"], f"expected b (least recently used) evicted, got {pair_cache.loaded_names()}"
    pair_cache.get_pair("a")
    assert cache == ["a", "b", "c"], "a pair still in the cache must not be loaded again"


def test_a_pair_bigger_than_the_budget_is_kept_alone(cache):
    pair_cache.get_pair("a")
    pair_cache.get_pair("big")
    assert pair_cache.loaded_names() == ["big"], "the pair just asked for stays, even alone over budget"
    assert pair_cache.status("big") is None, "a loaded pair has no pending status"
