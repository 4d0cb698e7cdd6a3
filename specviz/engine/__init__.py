"""The decoding engine: exact speculative decoding and its autoregressive baseline, as event generators."""

from specviz.engine.autoregressive import autoregressive_decode
from specviz.engine.drafters import Drafter, ModelDrafter, PromptLookupDrafter
from specviz.engine.events import Cycle, DraftPosition, Event, RunStarted, Step, Summary
from specviz.engine.kv_cache import CachedDecoder, rollback_to_accepted
from specviz.engine.sampling import SamplingSettings
from specviz.engine.settings import MAX_GAMMA, DecodeSettings, SettingsError
from specviz.engine.speculative import speculative_decode
from specviz.engine.tally import Tally
from specviz.engine.vocabulary import Vocabulary

__all__ = [
    "MAX_GAMMA",
    "CachedDecoder",
    "Cycle",
    "DecodeSettings",
    "DraftPosition",
    "Drafter",
    "Event",
    "ModelDrafter",
    "PromptLookupDrafter",
    "RunStarted",
    "SamplingSettings",
    "SettingsError",
    "Step",
    "Summary",
    "Tally",
    "Vocabulary",
    "autoregressive_decode",
    "rollback_to_accepted",
    "speculative_decode",
]
