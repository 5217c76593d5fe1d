"""Recurrent layers (nn.LSTM, nn.GRU, nn.RNN) train through thunderviz.jit like eager: loss
and every parameter gradient at each of three SGD steps, and gradients of the inputs and the
initial states against torch.autograd in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import thunderviz as tv
from tests.autodiff.idioms_training import train_like_eager
from tests.helpers import check_vjp


class _Recurrent(nn.Module):
    """A recurrent layer with a loss on its output and on its final states."""

    def __init__(self, rnn: nn.Module, *, with_state: bool) -> None:
        super().__init__()
        self.rnn = rnn
        self.with_state = with_state

    def forward(self, x, *state):
        out, final = self.rnn(x, *state) if self.with_state else self.rnn(x)
        finals = final if isinstance(final, tuple) else (final,)
        return out.tanh().sum() + sum((f * f).sum() for f in finals)


def _state(rnn: nn.Module, batch: int) -> tuple[torch.Tensor, ...]:
    directions = 2 if rnn.bidirectional else 1
    h_size = getattr(rnn, "proj_size", 0) or rnn.hidden_size
    h = torch.randn(rnn.num_layers * directions, batch, h_size)
    if isinstance(rnn, nn.LSTM):
        return ((h, torch.randn(rnn.num_layers * directions, batch, rnn.hidden_size)),)
    return (h,)


LAYERS = {
    "lstm": lambda: nn.LSTM(4, 3),
    "lstm_2layer_bidir_batch_first": lambda: nn.LSTM(
        4, 3, num_layers=2, bidirectional=True, batch_first=True
    ),
    "lstm_proj": lambda: nn.LSTM(4, 5, proj_size=2, num_layers=2),
    "lstm_no_bias": lambda: nn.LSTM(4, 3, bias=False),
    "lstm_dropout_between_layers": lambda: nn.LSTM(4, 3, num_layers=2, dropout=0.3),
    "lstm_eval": lambda: nn.LSTM(4, 3, num_layers=2, dropout=0.3).eval(),  # no workspace kept
    "gru_bidir": lambda: nn.GRU(4, 3, num_layers=2, bidirectional=True),
    "rnn_tanh": lambda: nn.RNN(4, 3, num_layers=2),
    "rnn_relu_bidir": lambda: nn.RNN(
        4, 3, nonlinearity="relu", bidirectional=True, batch_first=True
    ),
}


@pytest.mark.filterwarnings("ignore:LSTM with projections")
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "given_state"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_recurrent_layer_trains_like_eager(name, with_state):
    torch.manual_seed(0)
    rnn = LAYERS[name]()
    x = torch.randn(2, 5, 4) if rnn.batch_first else torch.randn(5, 2, 4)
    state = _state(rnn, 2) if with_state else ()
    train_like_eager(
        _Recurrent(rnn, with_state=with_state), lambda step: ((x, *state), {}), lambda loss: loss
    )


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN])
def test_gradients_of_input_and_initial_state_match_autograd(kind):
    torch.manual_seed(0)
    rnn = kind(4, 3, num_layers=2, bidirectional=True).double()
    x = torch.randn(5, 2, 4, dtype=torch.float64)
    h = torch.randn(4, 2, 3, dtype=torch.float64)
    if kind is nn.LSTM:
        c = torch.randn(4, 2, 3, dtype=torch.float64)
        check_vjp(lambda x, h, c: rnn(x, (h, c)), x, h, c)
    else:
        check_vjp(lambda x, h: rnn(x, h), x, h)


def test_fused_lstm_gradients_of_input_and_initial_state_match_autograd():
    """float32: the oneDNN layer (float64 runs cell by cell), against eager autograd."""
    torch.manual_seed(0)
    rnn = nn.LSTM(4, 3, num_layers=2, bidirectional=True)
    x, h, c = torch.randn(5, 2, 4), torch.randn(4, 2, 3), torch.randn(4, 2, 3)
    check_vjp(lambda x, h, c: rnn(x, (h, c)), x, h, c, rtol=1e-5, atol=1e-6)


def test_lstm_in_float32_uses_the_fused_kernel_and_its_own_backward():
    """The forward keeps eager's kernel (bit-exact), the backward is the kernel's own."""
    torch.manual_seed(0)
    model = _Recurrent(nn.LSTM(4, 3), with_state=False)
    jitted = tv.jit(model)
    jitted(torch.randn(5, 2, 4)).backward()
    forward_text = str(tv.last_traces(jitted)[-1])
    assert "mkldnn_rnn_layer" in forward_text
    assert "mkldnn_rnn_layer_backward" in str(tv.last_backward_traces(jitted)[0])


class _Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, 3, batch_first=True)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.rnn(packed)
        padded, _ = pad_packed_sequence(out, batch_first=True)
        return padded.tanh().sum() + (h * c).sum()


def test_packed_sequences_train_like_eager():
    torch.manual_seed(0)
    x = torch.randn(3, 6, 4)
    lengths = torch.tensor([4, 6, 2])
    train_like_eager(_Packed(), lambda step: ((x, lengths), {}), lambda loss: loss)


class _EmbeddedPacked(nn.Module):
    """The usual text classifier: embeddings packed, so the gradient flows through the
    packing into the embedding table (the packed data is the embeddings' steps)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 4, padding_idx=0)
        self.rnn = nn.LSTM(4, 3, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(6, 2, batch_first=True)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(
            self.embed(tokens), lengths, batch_first=True, enforce_sorted=False
        )
        out, (h, _) = self.rnn(packed)
        out, last = self.gru(out)
        padded, _ = pad_packed_sequence(out, batch_first=True)
        return padded.tanh().sum() + (h * h).sum() + last.sum()


def test_gradients_flow_through_the_packing_like_eager():
    torch.manual_seed(0)
    tokens = torch.randint(1, 11, (3, 6))
    lengths = torch.tensor([4, 6, 2])
    train_like_eager(_EmbeddedPacked(), lambda step: ((tokens, lengths), {}), lambda loss: loss)


def test_packing_gradient_matches_autograd():
    def f(x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=False, enforce_sorted=True)
        return packed.data

    x = torch.randn(5, 3, 2, dtype=torch.float64, requires_grad=True)
    check_vjp(f, x, torch.tensor([5, 3, 1]))


class _Unrolled(nn.Module):
    """A cell stepped through time in Python (nn.LSTMCell / GRUCell / RNNCell)."""

    def __init__(self, cell: nn.Module) -> None:
        super().__init__()
        self.cell = cell

    def forward(self, x):
        state = None
        for t in range(x.shape[0]):
            state = self.cell(x[t], state)
        states = state if isinstance(state, tuple) else (state,)
        return sum((s * s).sum() for s in states)


@pytest.mark.parametrize(
    "cell",
    [
        lambda: nn.LSTMCell(3, 5),
        lambda: nn.GRUCell(3, 5),
        lambda: nn.RNNCell(3, 5, nonlinearity="relu"),
    ],
    ids=["lstm_cell", "gru_cell", "rnn_relu_cell"],
)
def test_recurrent_cells_unrolled_in_python_train_like_eager(cell):
    torch.manual_seed(0)
    x = torch.randn(4, 2, 3)
    train_like_eager(_Unrolled(cell()), lambda step: ((x,), {}), lambda loss: loss)
