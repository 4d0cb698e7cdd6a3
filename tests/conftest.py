import pytest
import torch
from transformers.utils import logging

logging.set_verbosity_error()
logging.disable_progress_bar()
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture(scope="session")
def bundled_pair():
    """The bundled pycode pair, loaded once for the whole test session."""
    from specviz.catalogue import load_catalogue
    from specviz.loading import load_pair

    catalogue = load_catalogue()
    return load_pair("pycode-distilled", catalogue.get("pycode-distilled"), catalogue.offline_pairs())
