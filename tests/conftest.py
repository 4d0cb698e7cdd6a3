import pytest
import torch
from transformers.utils import logging

logging.set_verbosity_error()
logging.disable_progress_bar()
torch.set_num_threads(1)  # tiny models run fastest on one thread; the bundled pair barely gains from two


@pytest.fixture(scope="session")
def bundled_pair():
    """The bundled pycode pair, loaded once for the whole test session."""
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair

    catalogue = load_catalogue()
    return load_pair("pycode-distilled", catalogue.get("pycode-distilled"), catalogue.offline_pairs())
