"""The decoding engine: exact speculative decoding and its autoregressive baseline, as event generators.

Names are imported on first use (PEP 562), so that importing the light parts (events, tally,
settings: no torch) does not pull in torch or transformers: the app serves its first page before
the models load (tests/test_light_page.py holds it to that).
"""

from importlib import import_module

_HOMES = {
    "autoregressive_decode": "autoregressive",
    "AdaptiveGamma": "drafter",
    "Drafter": "drafter",
    "Proposal": "drafter",
    "Feedback": "drafter",
    "Cycle": "events",
    "DraftPosition": "events",
    "Event": "events",
    "RunStarted": "events",
    "Step": "events",
    "Summary": "events",
    "CachedDecoder": "kv_cache",
    "rollback_to_accepted": "kv_cache",
    "SamplingSettings": "settings",
    "MAX_GAMMA": "settings",
    "DecodeSettings": "settings",
    "SettingsError": "settings",
    "StopCheck": "settings",
    "speculative_decode": "speculative",
    "Tally": "tally",
    "Vocabulary": "vocabulary",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'specviz.engine' has no attribute {name!r}")
    return getattr(import_module(f"specviz.engine.{_HOMES[name]}"), name)
