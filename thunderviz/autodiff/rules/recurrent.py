"""Grad rules for recurrent layers.

On the CPU `nn.LSTM` / `nn.GRU` / `nn.RNN` run as `torch.lstm` / `torch.gru` / `torch.rnn_*`,
which eager turns into one fused kernel call per layer and direction where oneDNN has it
(`aten.mkldnn_rnn_layer`: LSTM without `proj_size`), else into cell-by-cell ATen ops (GRU,
RNN, LSTM with `proj_size`, packed sequences) that the elementwise and linalg rules cover.
The fused layer keeps its forward (bit-exact with eager) and is differentiated by its own
backward kernel, as torch's derivatives.yaml does: `mkldnn_rnn_layer_backward` reads the
layer's inputs, its outputs and the workspace the forward filled in.

Under `torch.no_grad()`, which is how traces run, the kernel leaves that workspace out; the
augmented forward therefore calls it with grad mode on, on detached inputs (so autograd
records nothing): `torch.enable_grad()(torch.ops.aten.mkldnn_rnn_layer.default)(...)`.
"""

from __future__ import annotations

import functools

import torch

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.core.symbol import Symbol
from thunderviz.prims import aten
from thunderviz.prims.aten import meta_outputs

RULES = RuleSet("recurrent")

_MKLDNN_LAYER = torch.ops.aten.mkldnn_rnn_layer.default
MKLDNN_LAYER_WITH_WORKSPACE = Symbol(
    name="torch.enable_grad()(torch.ops.aten.mkldnn_rnn_layer.default)",
    id="thunderviz.mkldnn_rnn_layer_with_workspace",
    fn=torch.enable_grad()(_MKLDNN_LAYER),
    meta=functools.partial(meta_outputs, _MKLDNN_LAYER),
    label="mkldnn_rnn_layer",
)


@RULES.grad(aten.mkldnn_rnn_layer.default)
def mkldnn_rnn_layer(
    input,
    weight_ih,
    weight_hh,
    bias_ih,
    bias_hh,
    hx,
    cx,
    reverse,
    batch_sizes,
    mode,
    hidden_size,
    num_layers,
    has_biases,
    bidirectional,
    batch_first,
    train,
):
    tensors = [
        aten.detach.default(t) for t in (input, weight_ih, weight_hh, bias_ih, bias_hh, hx, cx)
    ]
    output, hy, cy, workspace = MKLDNN_LAYER_WITH_WORKSPACE(
        *tensors,
        reverse,
        batch_sizes,
        mode,
        hidden_size,
        num_layers,
        has_biases,
        bidirectional,
        batch_first,
        train,
    )
    g_output, g_hy, g_cy = get_grad(output), get_grad(hy), get_grad(cy)
    grads = aten.mkldnn_rnn_layer_backward.default(
        input,
        weight_ih,
        weight_hh,
        bias_ih,
        bias_hh,
        hx,
        cx,
        output,
        hy,
        cy,
        g_output,
        g_hy,
        g_cy,
        reverse,
        mode,
        hidden_size,
        num_layers,
        has_biases,
        train,
        bidirectional,
        batch_sizes,
        batch_first,
        workspace,
    )
    for x, g in zip((input, weight_ih, weight_hh, bias_ih, bias_hh, hx, cx), grads, strict=True):
        if requires_grad(x):
            put_grad(x, g)
    return output, hy, cy, workspace
