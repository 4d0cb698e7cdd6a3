"""Whether a model, as loaded, gives a verify pass's every row the bits of its one-token step on every CPU.

Greedy speculation equals plain decoding to the token only where a token's logits do not depend on the rows beside
it. models/weight_forms.py puts a model's matrix products in weight-only forms whose kernels give each row its own
accumulator (int8, int4, vnni4), and sets transformers' attention to the fast path's (models/row_attention.py, named
`ROW_EXACT_ATTENTION` here). A float linear layer left anywhere (bf16, fp32, or a shape a form could not take) is a
oneDNN or MKL GEMM, which picks its kernel by the number of rows: fp32 and bf16 layers differed in the last bits
between one row and five on an AMD EPYC (Zen 4). A run on such a model says it is exact only up to rounding
(RunStarted.rows_exact, events.NOT_ROW_EXACT).
"""

from __future__ import annotations

from torch import nn

ROW_EXACT_ATTENTION = "specviz_row_exact"  # transformers' name for the row-exact attention (models/row_attention.py)


def model_rows_independent(model: nn.Module, engine: str) -> bool:
    """Every matrix product of the model's layers (its LM head included) a weight-only form's, and its attention
    row-exact: the fast path's own (`engine` "compiled" or "eager"), or transformers' set to it."""
    for module in model.modules():
        if isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D":  # the forms replace both whole
            return False
    if engine in ("compiled", "eager"):
        return True  # engine/static_cache.py's attention
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None) == ROW_EXACT_ATTENTION
