"""The report's cold-load timing on the bundled pair as shipped: its weights packed with xz, read as the app reads them."""

from pathlib import Path

from specviz.deployment.load_timing import COLD_SOURCE, load_times
from specviz.models.stored import PACKED, WEIGHTS


def test_cold_load_times_the_bundled_pair_as_shipped(bundled_pair):
    folders = [Path(model.reference) for model in (bundled_pair.target, bundled_pair.draft)]
    assert all((folder / PACKED).is_file() and not (folder / WEIGHTS).exists() for folder in folders), (
        f"the guard needs folders that ship only packed weights, as the bundle does: {folders}"
    )
    times, numbers = load_times(bundled_pair, cold_start=True)
    assert numbers["cold_source"] == COLD_SOURCE, "cold_start=True times a fresh process, and says so"
    for role, model in (("target", times.target), ("draft", times.draft)):
        assert model.cold_s > 0 and model.warm_s > 0, f"{role}: a fresh process's load and this one's both take time"
    assert numbers["import_s"] > 0, "the fresh process times its imports (torch, transformers) apart from the loads"
