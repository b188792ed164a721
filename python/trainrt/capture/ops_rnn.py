"""Recurrent layers (nn.LSTM, nn.GRU, nn.RNN): aten.lstm / gru / rnn_tanh / rnn_relu unrolled over time.

The engine has no loop op. With a static sequence length T each time step becomes ordinary nodes
(Gemm, Add, Sigmoid, Tanh, Mul, Split, Concat), so the engine's autodiff differentiates the unrolled
graph: backpropagation through time with no gradient rule of its own. The cells, as the PyTorch docs
of nn.LSTM, nn.GRU and nn.RNN write them (gate order of the packed weights included):

    LSTM  i, f, g, o = split(x W_ih^T + b_ih + h W_hh^T + b_hh)      (4 chunks of H)
          c' = sigmoid(f) * c + sigmoid(i) * tanh(g);  h' = sigmoid(o) * tanh(c')
    GRU   r, z = sigmoid(split(x W_ir,z^T + b_ir,z + h W_hr,z^T + b_hr,z))
          n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn));  h' = (1 - z) * n + z * h = n + z * (h - n)
    RNN   h' = tanh or relu(x W_ih^T + b_ih + h W_hh^T + b_hh)

Per layer and direction, the input side x W_ih^T (+ biases) of all T steps is one FusedMatMul over
(T, B, I) or (B, T, I), split into T steps; only h W_hh^T (a Gemm (B, H) x (G*H, H)^T) is in the
recurrence. The reverse direction of a bidirectional layer walks the steps backwards; its outputs
are concatenated after the forward one's on the feature axis. Between layers, dropout applies to
each layer's output but the last one's in training (the engine's Dropout, as nn.LSTM does it).

Not translated: proj_size (LSTM with projections). Packed sequences (pack_padded_sequence) do not get
here: torch.export fails on their data-dependent batch sizes. torch.export makes T static (the op's
shape function specializes it), so a new sequence length is a new capture.
"""

from __future__ import annotations

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.ops_nn import dropout_with_mask
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static


@translates("aten.lstm.input")
def lstm(ctx: OpContext) -> list[str]:
    """(output, h_n, c_n); hx is [h_0, c_0], each (num_layers * directions, B, H)."""
    h0, c0 = ctx["hx"]
    if h0.shape[-1] != c0.shape[-1]:
        raise ctx.unsupported("with proj_size > 0 (LSTM with projections) has no TrainRT translation")
    return _unroll(ctx, "LSTM", h0, c0)


@translates("aten.gru.input")
def gru(ctx: OpContext) -> list[str]:
    """(output, h_n); hx is h_0 (num_layers * directions, B, H)."""
    return _unroll(ctx, "GRU", ctx.tensor("hx"), None)


@translates("aten.rnn_tanh.input")
def rnn_tanh(ctx: OpContext) -> list[str]:
    return _unroll(ctx, "Tanh", ctx.tensor("hx"), None)


@translates("aten.rnn_relu.input")
def rnn_relu(ctx: OpContext) -> list[str]:
    return _unroll(ctx, "Relu", ctx.tensor("hx"), None)


def _unroll(ctx: OpContext, cell: str, h0: TensorValue, c0: TensorValue | None) -> list[str]:
    """The outputs of aten.<rnn>.input for cell "LSTM", "GRU", "Tanh" or "Relu" (the RNN's activation):
    output (T, B, D*H) or (B, T, D*H) with batch_first, h_n (L*D, B, H) and, for the LSTM, c_n.
    params hold, per layer and direction, w_ih (G*H, in), w_hh (G*H, H) [, b_ih, b_hh (G*H)]."""
    x = ctx.tensor("input")
    layers, directions = ctx["num_layers"], 2 if ctx["bidirectional"] else 1
    per_group = 4 if ctx["has_biases"] else 2
    params = ctx["params"]
    time_axis = 1 if ctx["batch_first"] else 0
    steps = x.shape[time_axis]
    if not is_static(steps):
        raise ctx.unsupported(f"with a symbolic sequence length ({steps}) has no TrainRT translation: "
                              "unrolling over time needs a static length")
    dropout = ctx["dropout"] if ctx["train"] else 0.0
    h_init = _split_states(ctx, h0, layers * directions)
    c_init = _split_states(ctx, c0, layers * directions) if c0 is not None else None
    h_last, c_last = [], []
    layer_in = x
    for layer in range(layers):
        outs = []
        for d in range(directions):
            k = layer * directions + d
            weights = params[k * per_group:(k + 1) * per_group]
            out, h, c = _direction(ctx, cell, layer_in, time_axis, int(steps), weights, reverse=d == 1,
                                   h=h_init[k], c=c_init[k] if c_init else None)
            outs.append(out)
            h_last.append(h)
            c_last.append(c)
        y = outs[0] if directions == 1 else ctx.emit("Concat", outs, axis=2)
        shape = (*x.shape[:2], directions * h0.shape[-1])
        if dropout > 0 and layer < layers - 1:
            y = dropout_with_mask(ctx, TensorValue(y, x.dtype, shape), dropout)[0]
        layer_in = TensorValue(y, x.dtype, shape)
    results = [layer_in.name, _stack_states(ctx, h_last)]
    return results + [_stack_states(ctx, c_last)] if c0 is not None else results


def _direction(ctx: OpContext, cell: str, x: TensorValue, time_axis: int, steps: int, weights,
               reverse: bool, h: str, c: str | None) -> tuple[str, str, str | None]:
    """One layer in one direction over all steps: (output (T, B, H) or (B, T, H), h_T, c_T)."""
    w_ih, w_hh = weights[0], weights[1]
    hidden = int(w_hh.shape[1])
    b_ih, b_hh = (weights[2], weights[3]) if len(weights) == 4 else (None, None)
    # Both biases join the input side, except the GRU's b_hn, which r multiplies: b_hh stays in the step.
    bias = b_ih if cell == "GRU" or b_hh is None else ctx.emit("Add", [b_ih, b_hh])
    x_side = ctx.emit("FusedMatMul", [x, w_ih, bias], transB=1, domain="com.trainrt")  # (.., T, .., G*H)
    pieces = [x_side] if steps == 1 else ctx.emit("Split", [x_side, ctx.ints([1] * steps)], steps, axis=time_axis)
    axis = ctx.ints([time_axis])
    outputs = [None] * steps
    for t in reversed(range(steps)) if reverse else range(steps):
        x_t = ctx.emit("Squeeze", [pieces[t], axis])  # (B, G*H)
        if cell == "LSTM":
            h, c = _lstm_step(ctx, x_t, h, c, w_hh, hidden)
        elif cell == "GRU":
            h = _gru_step(ctx, x_t, h, w_hh, b_hh, hidden)
        else:
            h = ctx.emit(cell, [ctx.emit("Gemm", [h, w_hh, x_t], transB=1)])
        outputs[t] = ctx.emit("Unsqueeze", [h, axis])
    out = outputs[0] if steps == 1 else ctx.emit("Concat", outputs, axis=time_axis)
    return out, h, c


def _lstm_step(ctx: OpContext, x_t: str, h: str, c: str, w_hh, hidden: int) -> tuple[str, str]:
    """x_t (B, 4H) holds x W_ih^T + b_ih + b_hh; returns (h', c'), each (B, H)."""
    gates = ctx.emit("Gemm", [h, w_hh, x_t], transB=1)  # (B, 4H)
    i, f, g, o = ctx.emit("Split", [gates, ctx.ints([hidden] * 4)], 4, axis=1)
    c = ctx.emit("Add", [ctx.emit("Mul", [ctx.emit("Sigmoid", [f]), c]),
                         ctx.emit("Mul", [ctx.emit("Sigmoid", [i]), ctx.emit("Tanh", [g])])])
    return ctx.emit("Mul", [ctx.emit("Sigmoid", [o]), ctx.emit("Tanh", [c])]), c


def _gru_step(ctx: OpContext, x_t: str, h: str, w_hh, b_hh, hidden: int) -> str:
    """x_t (B, 3H) holds x W_ih^T + b_ih; returns h' (B, H)."""
    h_side = ctx.emit("Gemm", [h, w_hh, b_hh], transB=1)  # (B, 3H): h W_hh^T + b_hh
    rz_n = ctx.ints([2 * hidden, hidden])
    x_rz, x_n = ctx.emit("Split", [x_t, rz_n], 2, axis=1)
    h_rz, h_n = ctx.emit("Split", [h_side, rz_n], 2, axis=1)
    rz = ctx.emit("Sigmoid", [ctx.emit("Add", [x_rz, h_rz])])  # (B, 2H)
    r, z = ctx.emit("Split", [rz, ctx.ints([hidden, hidden])], 2, axis=1)
    n = ctx.emit("Tanh", [ctx.emit("Add", [x_n, ctx.emit("Mul", [r, h_n])])])
    return ctx.emit("Add", [n, ctx.emit("Mul", [z, ctx.emit("Sub", [h, n])])])


def _split_states(ctx: OpContext, states: TensorValue, count: int) -> list[str]:
    """(L*D, B, H) -> L*D states (B, H)."""
    if count == 1:
        return [ctx.emit("Squeeze", [states, ctx.ints([0])])]
    parts = ctx.emit("Split", [states, ctx.ints([1] * count)], count, axis=0)
    return [ctx.emit("Squeeze", [p, ctx.ints([0])]) for p in parts]


def _stack_states(ctx: OpContext, states: list[str]) -> str:
    """L*D states (B, H) -> (L*D, B, H)."""
    axis = ctx.ints([0])
    parts = [ctx.emit("Unsqueeze", [s, axis]) for s in states]
    return parts[0] if len(parts) == 1 else ctx.emit("Concat", parts, axis=0)
