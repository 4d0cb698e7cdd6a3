"""Whether a model, as loaded, gives a verify pass's every row the bits of its one-token step on every CPU.

Greedy speculation equals plain decoding to the token only where a token's logits do not depend on the rows beside
it: every matrix product in a row-independent weight form (kernels/forms.model_rows_independent: a float linear layer
left anywhere is a oneDNN or MKL GEMM, which picks its kernel by the number of rows; fp32 and bf16 layers differed in
the last bits between one row and five on an AMD EPYC Zen 4), and an attention that computes a row alike whatever the
rows beside it (models/row_attention.py, named `ROW_EXACT_ATTENTION` here). A run on any other model says it is exact
only up to rounding (RunStarted.rows_exact, events.NOT_ROW_EXACT).
"""

from __future__ import annotations

from torch import nn

from specviz.kernels.forms import model_rows_independent as products_row_independent

ROW_EXACT_ATTENTION = "specviz_row_exact"  # transformers' name for the row-exact attention (models/row_attention.py)


def model_rows_independent(model: nn.Module, engine: str) -> bool:
    """Every matrix product of the model's layers (its LM head included) a row-independent form's, and its attention
    row-exact: the fast path's own (`engine` "compiled" or "eager"), or transformers' set to it."""
    if not products_row_independent(model):
        return False
    if engine in ("compiled", "eager"):
        return True  # engine/static_cache.py's attention
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None) == ROW_EXACT_ATTENTION
