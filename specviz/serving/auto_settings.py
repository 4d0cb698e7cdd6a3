"""The page's `γ auto`: the chain or tree measured to pay for a pair on this machine (deployment/machine_setting.py).

Read from specviz's cache where this machine measured it before; else measured once, in a background thread that
holds the measuring slot (serving/measuring_slot.py) after waiting for the machine to be quiet, as a Run's measurement
does. Other visitors' pages keep serving meanwhile, and their Runs wait their turn as for any measurement; the Run
that asked shows a note while it waits. A measurement taken while other programs used the processor (our compile
worker among them), or while this server loaded a pair, serves ten minutes, then the next Run measures it again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from specviz.engine.settings import SamplingSettings
from specviz.run.chosen_setting import ChosenSetting
from specviz.run.machine_load import settle
from specviz.serving import compile_worker, recorder
from specviz.serving.measuring_slot import MEASURING_SLOT

if TYPE_CHECKING:
    from specviz.models.loading import LoadedPair

log = logging.getLogger("specviz")

SETTLE_S, SETTLE_MAX_S = 0.25, 8.0  # as a Run's measurement waits for quiet (serving/recorder.py)
BUSY_KEPT_S = 600.0  # as deployment/machine_setting.BUSY_KEPT_S: a choice serves this long where specviz's cache lost it

_chosen: dict[str, tuple[ChosenSetting, float]] = {}  # key → (the choice this process measured, when)
_measuring: dict[str, threading.Thread] = {}
_errors: dict[str, Exception] = {}
_lock = threading.Lock()


def _key(pair: LoadedPair, drafter: str, sampling: SamplingSettings) -> tuple[str, dict]:
    from specviz.deployment.machine_setting import conditions, key_of  # torch-side: the pair is loaded, so torch is too

    described = conditions(pair, drafter, sampling)
    return key_of(described), described


def known(pair: LoadedPair, drafter: str, sampling: SamplingSettings) -> ChosenSetting | None:
    """The choice for the pair on this machine if this process or specviz's cache has it; never measures."""
    from specviz.deployment.machine_setting import kept_setting

    key, described = _key(pair, drafter, sampling)
    kept = kept_setting(described)  # specviz's cache decides how long a choice serves (machine_setting.BUSY_KEPT_S)
    if kept is not None:
        return kept
    found = _chosen.get(key)  # measured by this process, and not (or no longer) kept on disk
    return found[0] if found is not None and time.monotonic() - found[1] < BUSY_KEPT_S else None


def prepare(pair: LoadedPair, drafter: str, sampling: SamplingSettings) -> threading.Thread | None:
    """Measure the choice in the background unless it is known or already being measured: the thread that measures
    it (join it, then `result`), or None where it is known."""
    if known(pair, drafter, sampling) is not None:
        return None
    key, _ = _key(pair, drafter, sampling)
    with _lock:
        running = _measuring.get(key)
        if running is not None and running.is_alive():
            return running
        _errors.pop(key, None)
        thread = _measuring[key] = threading.Thread(
            target=_measure, args=(key, pair, drafter, sampling), name=f"auto-setting-{pair.name}", daemon=True
        )
        thread.start()
    return thread


def _measure(key: str, pair: LoadedPair, drafter: str, sampling: SamplingSettings) -> None:
    from specviz.deployment.machine_setting import remembered_setting

    try:
        with MEASURING_SLOT:
            settle(SETTLE_S, SETTLE_S if compile_worker.busy() else SETTLE_MAX_S)  # no use waiting out our own worker
            recorder.wait_while_loading(SETTLE_MAX_S)
            with compile_worker.paused():  # our own worker stopped while ν and the calibration run are timed
                chosen = remembered_setting(pair, drafter, sampling, own_work=recorder.own_work)
        _chosen[key] = (chosen, time.monotonic())
        log.info("%s, %s drafter: %s", pair.name, drafter, chosen.sentence)
    except Exception as error:  # the Run that waits says so and runs the γ on the page
        _errors[key] = error
        log.exception("measuring which setting pays for %s failed", pair.name)


def result(pair: LoadedPair, drafter: str, sampling: SamplingSettings) -> ChosenSetting | None:
    """After `prepare`'s thread ends: the choice, or None where measuring it failed (the log says why)."""
    key, _ = _key(pair, drafter, sampling)
    if key in _errors:
        return None
    found = _chosen.get(key)
    return found[0] if found else None
