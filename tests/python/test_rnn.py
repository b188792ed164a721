"""nn.LSTM, nn.GRU and nn.RNN unrolled over time (capture/ops_rnn.py): forward values against torch
at several batch sizes, and training parity (losses and parameters over AdamW steps) through RTModule
with a sequence of 32 steps, which also bounds the size of the unrolled graph."""

import warnings

import pytest
import torch
from onnx.numpy_helper import to_array
from torch import nn

from parity import assert_parity, train_both
from test_capture import assert_like_torch, capture, engine_forward, randn
from trainrt.capture import UnsupportedATenOp


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    """Parity through RTModule is the engine's (parity.train_both also checks fallback_reason)."""
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SEQ = 32


class Tagger(nn.Module):
    """Recurrent layer -> Linear -> MSE against targets: (x, h0 or None, y) -> loss."""

    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn
        directions = 2 if rnn.bidirectional else 1
        self.head = nn.Linear(directions * rnn.hidden_size, 3)

    def forward(self, x, y, *state):
        out, _ = self.rnn(x, *state) if state else self.rnn(x)
        return nn.functional.mse_loss(self.head(out), y)


def _batches(rnn: nn.Module, batch: int, with_state: bool):
    layers = rnn.num_layers * (2 if rnn.bidirectional else 1)

    def make(i):
        g = torch.Generator().manual_seed(i)
        shape = (batch, SEQ) if rnn.batch_first else (SEQ, batch)
        x = torch.randn(*shape, rnn.input_size, generator=g)
        y = torch.randn(*shape, 3, generator=g)
        if not with_state:
            return x, y
        h0 = torch.randn(layers, batch, rnn.hidden_size, generator=g)
        if isinstance(rnn, nn.LSTM):
            return x, y, (h0, torch.randn(layers, batch, rnn.hidden_size, generator=g))
        return x, y, h0

    return make


class AllOutputs(nn.Module):
    """The recurrent layer's output and final state(s), flattened: (output, h_n[, c_n])."""

    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *state):
        out, last = self.rnn(x, *state)
        return (out, *last) if isinstance(last, tuple) else (out, last)


def _states(layers, batch, hidden, lstm):
    h0 = randn(layers, batch, hidden, seed=1)
    return ((h0, randn(layers, batch, hidden, seed=2)),) if lstm else (h0,)


@pytest.mark.parametrize("rnn, make_args", [
    (nn.LSTM(4, 5, num_layers=2, batch_first=True, bidirectional=True), lambda b: (randn(b, 7, 4),)),
    (nn.LSTM(4, 5, num_layers=2, dropout=0.3).eval(), lambda b: (randn(7, b, 4), *_states(2, b, 5, True))),
    (nn.LSTM(4, 5, num_layers=2, dropout=0.3).train(), lambda b: (randn(7, b, 4),)),  # dropout: eval value
    (nn.GRU(4, 5, num_layers=2, bias=False), lambda b: (randn(7, b, 4),)),
    (nn.GRU(4, 5, bidirectional=True, batch_first=True), lambda b: (randn(b, 7, 4), *_states(2, b, 5, False))),
    (nn.RNN(4, 5, nonlinearity="relu", bidirectional=True), lambda b: (randn(7, b, 4), *_states(2, b, 5, False))),
    (nn.RNN(4, 5, num_layers=3, batch_first=True), lambda b: (randn(b, 1, 4),)),  # one step
], ids=["lstm-bidir-batch_first", "lstm-eval-dropout-state", "lstm-train-dropout0", "gru-nobias",
        "gru-bidir-state", "rnn_relu-bidir-state", "rnn_tanh-3layer-T1"])
def test_outputs_and_final_states_equal_torch(rnn, make_args):
    torch.manual_seed(0)
    if rnn.training:
        rnn.dropout = 0.0  # torch's dropout is random: dropout > 0 in training is tested below
    captured = assert_like_torch(AllOutputs(rnn), make_args)
    batch_axis = 0 if rnn.batch_first else 1
    dims = captured.input_dims[0]
    assert isinstance(dims[batch_axis], str) and isinstance(dims[1 - batch_axis], int)  # export keeps T static


def test_dropout_between_layers_in_training_is_the_engine_dropout():
    """nn.LSTM(dropout=p) drops the outputs of every layer but the last: one Dropout (with its mask
    output, which the gradient reads) per boundary. Kept values of layer 1 reach layer 2 scaled by
    1 / (1 - p), so the output differs from the eval one."""
    torch.manual_seed(0)
    rnn = nn.LSTM(4, 16, num_layers=3, dropout=0.5).train()
    x = randn(5, 8, 4)
    with warnings.catch_warnings():  # nor does the capture warn about the RNN's _flat_weights (export.py)
        warnings.simplefilter("error", UserWarning)
        captured = capture(AllOutputs(rnn), (x,), {})
    dropouts = [n for n in captured.model.graph.node if n.op_type == "Dropout"]
    assert len(dropouts) == 2 and all(len(n.output) == 2 for n in dropouts)
    ratio = {i.name: i for i in captured.model.graph.initializer}[dropouts[0].input[1]]
    assert to_array(ratio) == pytest.approx(0.5)
    first, _ = engine_forward(captured, AllOutputs(rnn), (x,))
    with torch.no_grad():
        rnn.eval()
        no_dropout = rnn(x)[0]
    assert not torch.allclose(first[0], no_dropout, atol=1e-4)
    assert torch.isfinite(first[0]).all()


def test_lstm_with_projections_is_refused_with_the_reason():
    with pytest.raises(UnsupportedATenOp, match=r"aten\.lstm\.input \(node 'lstm'.*proj_size > 0"):
        capture(AllOutputs(nn.LSTM(4, 8, proj_size=3)), (randn(7, 3, 4),), {})


@pytest.mark.parametrize("make_rnn, with_state", [
    pytest.param(lambda: nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True), False,
                 marks=pytest.mark.slow),  # torch.export alone takes ~7 s for its 128 cell steps
    (lambda: nn.LSTM(6, 8, bias=False), True),
    pytest.param(lambda: nn.GRU(6, 8, num_layers=2), True, marks=pytest.mark.slow),
    (lambda: nn.GRU(6, 8, batch_first=True, bidirectional=True), False),
    (lambda: nn.RNN(6, 8, num_layers=2, batch_first=True), False),
    (lambda: nn.RNN(6, 8, nonlinearity="relu", bidirectional=True), True),
], ids=["lstm-2layer-bidir-batch_first", "lstm-nobias-state", "gru-2layer-state", "gru-bidir-batch_first",
        "rnn_tanh-2layer", "rnn_relu-bidir-state"])
def test_training_matches_eager(make_rnn, with_state):
    torch.manual_seed(0)
    template = make_rnn()
    eager, ours, losses = train_both(lambda: Tagger(make_rnn()), _batches(template, 4, with_state), steps=4)
    assert_parity(eager, ours, losses)
    for (name, pe), (_, po) in zip(eager.named_parameters(), ours.named_parameters()):  # the last step's
        torch.testing.assert_close(po.grad, pe.grad, rtol=1e-3, atol=1e-5, msg=name)
