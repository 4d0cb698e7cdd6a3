"""The `fp32rows` weight form (kernels/fp32rows.py): the model's own float32 weights, each output one fixed chain of
fused multiply-adds, so a layer's row is the same bits alone and inside a verify pass (torch's float32 GEMMs pick a
kernel by the number of rows). A float32 model's norms and attention sums are torch's reductions, which may follow the
rows' count, so a model in it still says "exact up to rounding". The bundled pair runs in it; where its kernel cannot
run, the pair loads in plain float32 and says so."""

import logging

import pytest
import torch
from torch import nn

from specviz.kernels import forms, fp32rows
from specviz.models.weight_forms import apply_form, choose_form
from tests.tiny import tiny_llama

needs_kernel = pytest.mark.skipif(fp32rows.why_not() is not None, reason=f"{fp32rows.why_not()}")


@needs_kernel
@pytest.mark.parametrize("n_in,n_out,bias", [(320, 896, False), (896, 320, True), (64, 13, True), (8, 1, False)])
def test_a_row_is_the_same_bits_alone_and_in_any_pass_and_near_float64(n_in, n_out, bias):
    torch.manual_seed(n_in + n_out)
    linear = nn.Linear(n_in, n_out, bias=bias)
    layer = fp32rows.Fp32RowsLinear(linear)
    x = torch.randn(9, n_in)
    alone = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
    for rows in range(2, 10):
        assert torch.equal(layer(x[:rows]), alone[:rows]), f"a row changed beside {rows - 1} others"
    exact = x.double() @ linear.weight.double().T + (linear.bias.double() if bias else 0.0)
    scale = exact.abs().max().item() + 1.0
    assert (alone.double() - exact).abs().max().item() <= 1e-5 * scale, "not the layer's own products"
    assert layer(x.bfloat16()).dtype == torch.bfloat16 and layer(x[:3].view(1, 3, n_in)).shape == (1, 3, n_out)


@needs_kernel
def test_the_joined_projections_are_the_parts_bit_for_bit():
    torch.manual_seed(0)
    parts = [fp32rows.Fp32RowsLinear(nn.Linear(64, width, bias=False)) for width in (64, 16, 16)]
    x = torch.randn(5, 64)
    separate = torch.cat([part(x) for part in parts], dim=-1)
    joined = forms.concatenated(parts)
    assert isinstance(joined, fp32rows.Fp32RowsLinear) and torch.equal(joined(x), separate)


@needs_kernel
def test_a_model_in_the_form_keeps_its_float32_weights_and_its_rows():
    model = tiny_llama(64, seed=0, hidden=64)
    before = {name: p.detach().clone() for name, p in model.named_parameters() if p.dim() == 2 and "embed" not in name}
    apply_form(model, "fp32rows")
    assert model.weight_form == "fp32rows"
    # its products are row-independent, its float32 norms and attention sums not always: a run says "up to rounding"
    assert not forms.model_rows_independent(model) and not forms.rows_independent("fp32rows")
    kept = {name.removesuffix(".weight"): w for name, w in before.items()}
    compared = 0
    for name, module in model.named_modules():
        if isinstance(module, fp32rows.Fp32RowsLinear) and name in kept:
            assert torch.equal(module.weight, kept[name]), f"{name}: the form changed a weight"
            compared += 1
    layers = model.config.num_hidden_layers
    assert compared >= 7 * layers, f"only {compared} layers were compared: the form did not take the model's layers"


def test_where_the_kernel_cannot_run_the_pair_loads_in_plain_float32_and_says_so(monkeypatch, caplog):
    from specviz.models import weight_forms

    monkeypatch.setattr(fp32rows, "why_not", lambda: "the fp32rows kernel needs a CPU with AVX2 and FMA")
    monkeypatch.setattr(weight_forms, "_fell_back", set())
    with caplog.at_level(logging.WARNING):
        assert choose_form("fp32rows", torch.device("cpu")) == "fp32"
    assert "fp32rows kernel needs a CPU with AVX2 and FMA, so fp32 serves instead" in caplog.text
    caplog.clear()
    assert choose_form("fp32rows", torch.device("cpu")) == "fp32" and not caplog.text, "said once a process"
    assert choose_form("fp32rows", torch.device("cuda")) is None, "a GPU keeps the pair's dtype"
    assert "fp32rows" not in forms.packed_names(), "auto and the feature heads choose among quantised forms only"
