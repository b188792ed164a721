"""ATen ops that capture composes from engine ops, through RTModule against torch: forward values,
and the gradients of the inputs and parameters of loss = sum(output * w), with fallback disabled.

repeat (Tile), repeat_interleave (Unsqueeze + Expand + Reshape), group norm (per-group mean and
variance spelled out), weight norm (ReduceL2), argmax / argmin and max.dim's indices (the first
index equal to the extreme: Equal, Range, Where, ReduceMin), multiply (Mul), torch.vmap in forward
(its batched ATen ops: export.py retraces the transform away). Each module runs at two batch sizes on
one capture, since RTModule captures with symbolic dims.
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import trainrt


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    """An op the engine cannot run fails the test instead of silently running in torch."""
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class Lambda(nn.Module):
    def __init__(self, fn, *params: nn.Module):
        super().__init__()
        self.fn = fn
        self.layers = nn.ModuleList(params)

    def forward(self, *args):
        return self.fn(*args)


def _run(model, inputs, seed):
    """(output, input gradients, parameter gradients) of sum(output * w)."""
    inputs = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = model(*inputs)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    (out * w).sum().backward()
    return (out.detach(), [x.grad for x in inputs],
            {n: p.grad for n, p in model.named_parameters()})


def assert_like_torch(module: nn.Module, make_inputs, batches=(3, 5), rtol=1e-5, atol=1e-6):
    torch.manual_seed(0)
    ours = trainrt.RTModule(copy.deepcopy(module))
    for batch in batches:
        inputs = make_inputs(batch)
        want, got = _run(module, inputs, batch), _run(ours, inputs, batch)
        assert ours.fallback_reason is None
        assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
        torch.testing.assert_close(got[0], want[0], rtol=rtol, atol=atol, msg="output")
        for g, w in zip(got[1], want[1]):
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg="input gradient")
        for name in want[2]:
            torch.testing.assert_close(got[2][name], want[2][name], rtol=rtol, atol=atol, msg=name)
        module.zero_grad()
        ours.zero_grad()
    assert ours.num_captures == 1


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_padding_modes_other_than_constant(mode):
    """F.pad in reflect / replicate / circular mode: ONNX Pad (reflect, edge, wrap), gradients the engine's;
    on the last dim of a 3-d input and the last two of a 4-d one (torch's forms for 1-d and 2-d padding)."""
    assert_like_torch(Lambda(lambda x: F.pad(x, (2, 1), mode=mode) * 2), lambda b: [randn(b, 3, 6)])
    assert_like_torch(Lambda(lambda x: F.pad(x, (1, 2, 2, 0), mode=mode).tanh()), lambda b: [randn(b, 2, 5, 4)])


@pytest.mark.parametrize("fn", [
    lambda x: x.repeat(1, 2, 3),
    lambda x: x.repeat(2, 1, 1, 2),  # a leading dim added
    lambda x: x.repeat(1, 1, 1),  # no copy
], ids=["tile", "leading-dim", "ones"])
def test_repeat(fn):
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 3, 4)])


@pytest.mark.parametrize("fn", [
    lambda x: x.repeat_interleave(2, dim=1),
    lambda x: x.repeat_interleave(3, dim=-1),
    lambda x: x.repeat_interleave(2, dim=0),  # the symbolic batch
    lambda x: x.repeat_interleave(2),  # flattened
], ids=["dim1", "last", "batch", "flat"])
def test_repeat_interleave(fn):
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 3, 4)])


def test_repeat_interleave_of_key_value_heads_as_gpt_j_and_llama_do():
    """(batch, kv_heads, seq, head_dim) -> (batch, heads, seq, head_dim), then attention."""
    def attend(q, kv):
        kv = kv.repeat_interleave(2, dim=1)
        return torch.softmax(q @ kv.transpose(-1, -2), -1) @ kv

    assert_like_torch(Lambda(attend), lambda b: [randn(b, 4, 5, 8, seed=1), randn(b, 2, 5, 8, seed=2)])


@pytest.mark.parametrize("make, shape", [
    (lambda: nn.GroupNorm(2, 4), (4, 5)),
    (lambda: nn.GroupNorm(4, 4), (3, 3)),  # instance-norm like: one channel per group
    (lambda: nn.GroupNorm(1, 6, affine=False), (2, 3)),  # layer-norm like, no weight or bias
    (lambda: nn.GroupNorm(2, 4, eps=1e-3), (7,)),  # (N, C, L): Wav2Vec2's first feature conv layer
    (lambda: nn.GroupNorm(2, 4), ()),  # (N, C): groups of two channels, nothing spatial
], ids=["2d", "per-channel", "no-affine", "1d", "no-spatial"])
def test_group_norm(make, shape):
    torch.manual_seed(0)
    norm = make()
    if norm.affine:
        with torch.no_grad():
            norm.weight.uniform_(0.5, 2)
            norm.bias.uniform_(-1, 1)
    channels = norm.num_channels
    assert_like_torch(norm, lambda b: [randn(b, channels, *shape) * 3 + 1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make, dim, x_shape", [
    (lambda: nn.Linear(4, 3), 0, (4,)),
    (lambda: nn.Conv1d(3, 4, 3, padding=1), 2, (3, 6)),  # Wav2Vec2's positional conv
    (lambda: nn.Linear(4, 3), None, (4,)),  # one norm over the whole weight
], ids=["linear", "conv-dim2", "whole"])
def test_weight_norm(make, dim, x_shape):
    torch.manual_seed(0)
    layer = nn.utils.parametrizations.weight_norm(make(), dim=dim)
    assert_like_torch(layer, lambda b: [randn(b, *x_shape)], rtol=1e-4, atol=1e-5)


def as_float(index_of):
    """An index as the float output of a module that also reads x differentiably: RTModule
    builds a training program, which needs an output with a gradient."""
    return lambda x: index_of(x).to(x.dtype) + 0 * x.sum()


@pytest.mark.parametrize("fn", [
    lambda x: x.argmax(-1),
    lambda x: x.argmin(1, keepdim=True),
    lambda x: x.argmax(),  # over the flattened tensor
    lambda x: x.argmax(keepdim=True),
    lambda x: x.max(1).indices,
    lambda x: x.min(-1, keepdim=True)[1],
], ids=["argmax", "argmin-keepdim", "flat", "flat-keepdim", "max-indices", "min-indices"])
def test_index_of_the_extreme(fn):
    assert_like_torch(Lambda(as_float(fn)), lambda b: [randn(b, 5, 6)])


def test_index_of_the_extreme_is_the_first_of_ties():
    """Rounded values tie often; torch picks the first index of the extreme."""
    assert_like_torch(Lambda(as_float(lambda x: torch.stack([x.argmax(1), x.argmin(1)]))),
                      lambda b: [randn(b, 7, 3).round()])


def test_argmax_picks_what_the_loss_reads():
    """Decoder classifiers (GPT-2, Llama) take each row's logits at its last non-padding token,
    found by argmax: the gradient reaches those logits only."""
    def last_token_logits(logits, ids):
        last = (ids != 0).int().cumsum(-1).argmax(-1)  # (batch,)
        return logits[torch.arange(logits.shape[0]), last]

    def inputs(b):
        ids = torch.randint(1, 9, (b, 6), generator=torch.Generator().manual_seed(b))
        ids[1:, 4:] = 0
        return [randn(b, 6, 3), ids]

    assert_like_torch(Lambda(last_token_logits), inputs)


def test_max_with_indices_gives_both():
    assert_like_torch(Lambda(lambda x: (lambda m: m.values * m.indices)(x.max(-1))), lambda b: [randn(b, 4, 5)])


@pytest.mark.parametrize("fn", [
    lambda x: x.max(1).values,
    lambda x: x.min(-1, keepdim=True).values,
    lambda x: x.view(x.shape[0], 4, -1, 8).max(dim=1).values,  # Hiera's query pooling
], ids=["max", "min-keepdim", "hiera-pooling"])
def test_max_values_gradient_goes_to_the_first_of_ties(fn):
    """torch.max(x, dim)'s gradient reaches only the element its index names, the first of ties
    (rounded values tie often); a ReduceMax would share it among the ties."""
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 8, 8).round()])


def test_multiply():
    assert_like_torch(Lambda(lambda x, y: torch.multiply(x, y)), lambda b: [randn(b, 3, seed=1), randn(b, 3, seed=2)])


@pytest.mark.parametrize("fn", [
    torch.square,
    lambda x: nn.functional.hardtanh(x, -0.5, 0.7),
    nn.functional.relu6,
    nn.functional.hardsigmoid,
    nn.functional.hardswish,
    lambda x: nn.functional.glu(x, -1),
    lambda x: nn.functional.glu(x, 1),
], ids=["square", "hardtanh", "relu6", "hardsigmoid", "hardswish", "glu-last", "glu-1"])
def test_activations(fn):
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 4, 6) * 4])


@pytest.mark.parametrize("fn", [
    nn.functional.relu6,
    lambda x: nn.functional.hardtanh(x, -1.0, 2.0),
    nn.functional.hardsigmoid,
    nn.functional.hardswish,
], ids=["relu6", "hardtanh", "hardsigmoid", "hardswish"])
def test_activations_at_their_kinks_have_torchs_gradient(fn):
    """At the bounds themselves torch's hardtanh passes no gradient (clamp's would)."""
    kinks = torch.tensor([-4.0, -3.0, -1.0, 0.0, 2.0, 3.0, 6.0, 7.0])
    assert_like_torch(Lambda(fn), lambda b: [kinks.repeat(b, 1)])


@pytest.mark.parametrize("fn", [
    lambda x: torch.linalg.vector_norm(x, dim=-1),
    lambda x: torch.linalg.vector_norm(x, ord=1, dim=(1, 2), keepdim=True),
    lambda x: torch.linalg.vector_norm(x, ord=float("inf"), dim=1),
    lambda x: nn.functional.normalize(x, dim=-1),  # YOSO's and SwiftFormer's
    lambda x: x.norm(dim=1),
], ids=["l2", "l1-keepdim", "inf", "normalize", "norm"])
def test_vector_norm(fn):
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 4, 6)], rtol=1e-4, atol=1e-5)


def _masked_write(x, mask):
    """Wav2Vec2's `hidden_states[~mask] = 0` on (batch, frames, width), the mask over (batch, frames)."""
    y = x * 2
    y[~mask] = 0.5
    return y


def _row_marks(x, lengths):
    """Wav2Vec2's feature mask: zeros (batch, frames) with a 1 at each row's last frame, then cumsum."""
    marks = torch.zeros(x.shape[:2], dtype=x.dtype)
    marks[torch.arange(x.shape[0]), lengths - 1] = 1
    return x * marks.flip([-1]).cumsum(-1).flip([-1]).unsqueeze(-1)


def _rows_written(x, rows, idx):
    """x[idx] = rows: one row of values per index (a tensor written, both inputs train)."""
    y = x * 1
    y[idx] = rows * 3
    return y


def _rows_added(x, rows, idx):
    """x.index_put_((idx,), rows, accumulate=True) with a repeated index: the rows add up."""
    return (x * 1).index_put((idx,), rows * 3, accumulate=True)


def _elements_written(x, v):
    """x[i, j] = v[k] for K = 3 (i, j) pairs, and a negative index."""
    y = x * 1
    y[torch.tensor([0, 1, -1]), torch.tensor([2, 0, 1])] = v
    return y


@pytest.mark.parametrize("fn, inputs", [
    (_masked_write, lambda b: [randn(b, 5, 3), randn(b, 5, seed=1) > 0]),
    (lambda x, m: x.masked_fill(~m, 0) + x.index_put((m,), torch.tensor(1.0), accumulate=True),
     lambda b: [randn(b, 5), randn(b, 5, seed=1) > 0]),
    (_row_marks, lambda b: [randn(b, 6, 2), torch.arange(b) % 5 + 2]),
    (_rows_written, lambda b: [randn(b, 4), randn(2, 4, seed=1), torch.tensor([2, 0])]),
    (_rows_added, lambda b: [randn(b, 4), randn(3, 4, seed=1), torch.tensor([1, 0, 1])]),
    (_elements_written, lambda b: [randn(b, 3), randn(3, seed=1)]),
], ids=["bool-mask", "bool-mask-accumulate", "row-marks", "rows", "rows-accumulate", "elements"])
def test_index_put(fn, inputs):
    assert_like_torch(Lambda(fn), inputs)


@pytest.mark.parametrize("equation, shapes", [
    ("bhqd,bhkd->bhqk", [(2, 5, 4), (2, 6, 4)]),  # attention scores (CvT's)
    ("bij,bjk->bik", [(3, 4), (4, 2)]),
    ("binh,bjnh->bnij", [(5, 2, 3), (4, 2, 3)]),  # Funnel's
    ("bnd,nd->bn", [(3, 4), None]),  # a parameter-like operand without the batch
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,bjk", [(3, 4), (4, 2)]),  # implicit output: 'bik'
    ("bi,bj->bij", [(3,), (4,)]),  # outer product
    ("bij->bji", [(3, 4)]),
    ("bijk->bk", [(2, 3, 4)]),  # summed alone
    ("bij,bjk,bkl->bil", [(2, 3), (3, 4), (4, 2)]),  # three operands
    ("bi,bi->b", [(5,), (5,)]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_einsum(equation, shapes):
    def inputs(b):  # a None shape: an operand of (3, 4) without the batch
        return [randn(*((b, *s) if s else (3, 4)), seed=i) for i, s in enumerate(shapes)]

    assert_like_torch(Lambda(lambda *xs: torch.einsum(equation, *xs)), inputs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fn", [
    lambda x: x.T,
    lambda x: torch.expm1(x),
    lambda x: torch.log1p(x.abs()),
], ids=["numpy-T", "expm1", "log1p"])
def test_transpose_and_exp_log_forms(fn):
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 3, 4)], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("fn", [
    lambda x: torch.logsumexp(x, dim=-1),
    lambda x: torch.logsumexp(x, dim=(1, 2), keepdim=True),
    nn.functional.logsigmoid,
    lambda x: torch.remainder(x * 3, 1.5) + torch.remainder(x * 3, -2.0),
    lambda x: torch.concat([x, x * 2], dim=1),
    lambda x: torch.broadcast_to(x[:, :1], x.shape) * x,
    lambda x: x @ torch.eye(4) + torch.eye(3, 4),  # XLNet's
], ids=["logsumexp", "logsumexp-keepdim", "logsigmoid", "remainder", "concat", "broadcast_to", "eye"])
def test_reductions_and_factories(fn):
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 3, 4) * 3], rtol=1e-4, atol=1e-5)


def _strided_write(x, src):
    y = x * 1
    y[:, 1::3] = src * 2  # slice_scatter with step 3: positions 1, 4, 7
    return y


def _empty_strided_write(x):
    """A write of nothing: Qwen3.5's interleaved heads of a part that a tiny config leaves empty."""
    y = x * 1
    y[:, 9::3] = x[:, :0] * 2
    return y * x


def test_strided_slice_write_of_nothing():
    assert_like_torch(Lambda(_empty_strided_write), lambda b: [randn(b, 8, 2)])


def test_strided_slice_write_and_concatenate():
    assert_like_torch(Lambda(_strided_write), lambda b: [randn(b, 8, 2), randn(b, 3, 2, seed=1)])
    assert_like_torch(Lambda(lambda x: torch.concatenate([x, x.flip(1)], 1)), lambda b: [randn(b, 3)])


def _normalize_without_grad(x):
    """Phi-MoE's and CPM-Ant's `with torch.no_grad():` blocks: the scale is a constant for the
    gradient, so dx = dY / s, not dY / s minus the path through s."""
    with torch.no_grad():
        scale = x.abs().amax(-1, keepdim=True) + 1
    return x / scale


def test_no_grad_block_inside_forward():
    assert_like_torch(Lambda(_normalize_without_grad), lambda b: [randn(b, 5)])


def _to_inside_no_grad(x):
    """`h.to(h.dtype)` inside the block returns h itself; export makes the later `h * 2` read the
    block's output, which must keep h's gradient (Dots3's sparse-attention indexer: the attention's
    gate read its input that way, and the engine cut that gradient)."""
    h = x.tanh()
    with torch.no_grad():
        order = h.to(h.dtype).contiguous().argmax(-1, keepdim=True)
    return (h * 2).gather(-1, order)


def test_an_input_a_no_grad_block_returns_as_it_is_keeps_its_gradient():
    assert_like_torch(Lambda(_to_inside_no_grad), lambda b: [randn(b, 5)])


@pytest.mark.parametrize("fn", [
    lambda x: x.unfold(1, 3, 1),  # overlapping windows, the size dim appended after the rest
    lambda x: x.unfold(-1, 2, 2),  # the last dim, disjoint windows
    lambda x: x.unfold(1, 2, 3),  # gaps between windows
    lambda x: x.unfold(0, 2, 1),  # along the symbolic batch
], ids=["overlap", "last", "gaps", "batch"])
def test_unfold(fn):
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 7, 4)])


@pytest.mark.parametrize("fn", [
    lambda x: x.var(0),  # over the symbolic batch: N is computed in the graph
    lambda x: x.var((0, 2), keepdim=True),
    lambda x: x.var(-1, correction=0),
    lambda x: x.var(1, correction=2),
    lambda x: x.var(),
    lambda x: x.std(-1),
    lambda x: x.std((0, 1), correction=0, keepdim=True),
    lambda x: torch.cat([t.flatten() for t in torch.var_mean(x, 1)]),
    lambda x: torch.cat([t.flatten() for t in torch.std_mean(x, (0, 2), keepdim=True)]),
], ids=["var-batch", "var-keepdim", "var-biased", "var-correction-2", "var-all", "std", "std-biased-keepdim",
        "var_mean", "std_mean"])
def test_variance_and_standard_deviation(fn):
    """sum((x - mean)^2) / max(0, N - correction), as torch.var and torch.std define them."""
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 4, 6, seed=b) * 3 + 1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_bitwise_ops_on_integers(dtype):
    """|, &, ^ and ~ on integer tensors (tensor and scalar operands): ONNX BitwiseOr / And / Xor / Not,
    read as masks and position flags the way CPM-Ant's attention mask is built."""
    def fn(x, a, b):
        bits = ((a | b) ^ (a & 5)) | (~b & 3)
        return x * bits.float() + (torch.bitwise_xor(a, 6) == torch.bitwise_or(b, 1)).float()

    def inputs(batch):
        g = torch.Generator().manual_seed(batch)
        return [randn(batch, 5), torch.randint(0, 100, (batch, 5), generator=g).to(dtype),
                torch.randint(0, 100, (1, 5), generator=g).to(dtype)]

    assert_like_torch(Lambda(fn), inputs)


@pytest.mark.parametrize("fn", [
    lambda x: torch.cat(torch.tensor_split(x, [1, 4], dim=-1), -1) * 2,
    lambda x: torch.stack([p.sum(-1) for p in torch.tensor_split(x, [4, 2, 9, -1], dim=2)], -1),  # overlapping, empty, clamped, negative
    lambda x: torch.cat([p * (i + 1) for i, p in enumerate(torch.tensor_split(x, 3, dim=1))], 1),  # sections
    lambda x: torch.cat([p * (i + 1) for i, p in enumerate(x.tensor_split([1], dim=0))], 0),  # along the symbolic batch
], ids=["indices", "odd-indices", "sections", "batch"])
def test_tensor_split(fn):
    """torch.tensor_split by indices (Mamba-style mixers split the projection with it) and by sections."""
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 5, 6)])


class ComplexRotary(nn.Module):
    """Rotary embedding written with complex numbers, as Llama 4 and DeepSeek-V2 write it: polar,
    view_as_complex, a complex product, view_as_real; plus a complex times a real tensor and a
    number, unsqueeze, slicing and a reshape of complex values."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)

    def forward(self, x):  # x: (B, T, 8)
        B, T, _ = x.shape
        freqs = torch.outer(torch.arange(T, dtype=torch.float32), 1.0 / 10 ** torch.arange(0, 1, 0.25))  # (T, 4)
        cis = torch.polar(torch.ones_like(freqs), freqs) * 0.5  # (T, 4) complex
        q = torch.view_as_complex(self.q(x).float().reshape(B, T, -1, 2))  # (B, T, 4) complex
        rotated = q * cis[None, :, :] * x[..., :4]  # complex * complex * real
        rotated = rotated.unsqueeze(1)[:, :, :, 1:].reshape(B, 1, T * 3)
        return torch.view_as_real(rotated).flatten(2)


def test_complex_rotary_embedding():
    assert_like_torch(ComplexRotary(), lambda b: [randn(b, 5, 8)], rtol=1e-5, atol=1e-5)


def test_a_complex_op_without_a_translation_is_named():
    model = trainrt.RTModule(Lambda(lambda x: torch.view_as_complex(x.reshape(-1, 2)).abs()))
    with pytest.raises(RuntimeError, match="aten.abs.default .* on complex tensors has no TrainRT translation"):
        model(randn(3, 4))


def test_outer():
    """torch.outer of two vectors (Llama's precompute_freqs_cis), with both gradients."""
    assert_like_torch(Lambda(lambda x, y: torch.outer(x.sum(0), y.mean(0))), lambda b: [randn(b, 4, seed=1), randn(b, 3, seed=2)])


@pytest.mark.parametrize("fn", [
    lambda x: torch.fft.fftn(x, dim=(1, 2)).real,  # FNet's token mixing
    lambda x: torch.fft.fft(x, dim=-1).imag * 2 + torch.fft.fft(x, dim=1).real,
    lambda x: torch.view_as_real(torch.fft.fft(x, dim=-1, norm="ortho")).flatten(-2),
    lambda x: torch.fft.ifft(torch.fft.fft(x.to(torch.complex64), dim=-1, norm="forward") * x[..., :1], dim=-1,
                             norm="forward").real,
    lambda x: torch.fft.ifftn(torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2)), dim=(0, 1), norm="ortho").imag,
], ids=["fftn-real", "fft-imag", "fft-ortho", "ifft-forward", "ifftn-complex-ortho"])
def test_fourier_transforms(fn):
    """torch.fft.fft / fftn / ifft / ifftn as ONNX DFT per axis on (real, imaginary) pairs, every norm.
    The last dim is 8, not 6: at batch 3 a last dim of 6 gives 6 // 2 == 3 complex pairs, and export's
    trace of view_as_complex records that equality as a guard, so batch 5 is rightly captured again."""
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 5, 8)], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", [
    nn.Unfold(kernel_size=(3, 1), padding=(1, 0)),  # ConvBERT's span-based convolution
    nn.Unfold(kernel_size=2, dilation=(1, 2), padding=1, stride=(2, 1)),
    lambda x: nn.functional.unfold(x[0], 2),  # unbatched (C, H, W)
], ids=["convbert", "dilated-strided", "unbatched"])
def test_unfold(fn):
    """nn.Unfold (aten.im2col) as a one-hot grouped Conv: columns, and gradients through them."""
    module = fn if isinstance(fn, nn.Module) else Lambda(fn)
    assert_like_torch(module, lambda b: [randn(b, 3, 5, 6)])


@pytest.mark.parametrize("fn, rows, windows", [
    (nn.Fold((5, 6), kernel_size=2, stride=2, padding=(1, 0)), 3 * 4, 3 * 3),  # stride = kernel, padding dropped
    (nn.Fold((6, 5), kernel_size=(2, 3), dilation=(2, 1), padding=1, stride=(1, 2)), 2 * 6, 6 * 3),
    (nn.Fold((4, 5), kernel_size=3), 2 * 9, 2 * 3),  # overlapping windows sum
    (lambda x: nn.functional.fold(x[0], (4, 4), 2, stride=2), 3 * 4, 2 * 2),  # unbatched (C * kh * kw, L)
], ids=["strided-padded", "dilated", "overlapping", "unbatched"])
def test_fold(fn, rows, windows):
    """nn.Fold (aten.col2im) as ScatterElements adding each column entry (C * kh * kw rows, L
    windows) to its pixel: images, and the gradient of the columns (im2col of dY, 0 for the
    entries that fall in the padding)."""
    assert_like_torch(fn if isinstance(fn, nn.Module) else Lambda(fn), lambda b: [randn(b, rows, windows)])


def test_fold_of_unfold_as_mobilevitv2_restores_its_patches():
    """MobileViTV2 unfolds a feature map into patches, attends over them and folds them back."""
    def patches(x):
        cols = nn.functional.unfold(x, kernel_size=2, stride=2)  # (b, 3 * 4, 6)
        return nn.functional.fold(cols * cols.softmax(-1), (4, 6), kernel_size=2, stride=2)

    assert_like_torch(Lambda(patches), lambda b: [randn(b, 3, 4, 6)])


def test_a_number_read_only_by_a_check_needs_no_translation():
    """XLM's `assert lengths.max().item() <= slen` (a runtime assert in the exported graph, here
    written with torch._check): the item feeds the assert only (dropped), so the model runs in the
    engine; a float item a computation reads is still named as untranslated (an integer one sizes
    tensors: test_capture_moe_ops.test_split_by_counts_read_with_item)."""
    def checked(x, lengths):
        torch._check(lengths.max().item() <= x.shape[1])
        return x * (torch.arange(x.shape[1]) < lengths[:, None]).unsqueeze(-1)

    assert_like_torch(Lambda(checked), lambda b: [randn(b, 5, 3), torch.randint(1, 6, (b,))])
    used = trainrt.RTModule(Lambda(lambda x: x * x.sum().item()))
    with pytest.raises(RuntimeError, match=r"aten\.(item|_local_scalar_dense)"):
        used(randn(2, 3))


def _eos_rows(batch):
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(3, 9, (batch, 7), generator=g)
    ids[:, 4] = 2  # every row has two <eos> (id 2), as BART's classifiers require
    ids[:, -1] = 2
    return [randn(batch, 7, 5, seed=batch), ids]


def test_bool_mask_rows_as_bart_picks_its_last_eos_state():
    """BART's classification head: a check that every row has as many <eos> (unique_consecutive,
    read only by runtime asserts), then hidden[eos_mask] (K rows, K known when the step runs)
    viewed per row, the last one taken; gradients flow to the picked rows only."""
    def head(hidden, ids):
        eos = ids.eq(2)
        torch._check(torch.unique_consecutive(eos.sum(1)).numel() == 1)  # transformers' torch_compilable_check
        return hidden[eos, :].view(hidden.size(0), -1, hidden.size(-1))[:, -1, :] * 3

    assert_like_torch(Lambda(head), _eos_rows)


def _labels(batch):
    labels = torch.randint(0, 3, (batch,), generator=torch.Generator().manual_seed(batch))
    labels[1] = -100  # an unlabelled example, left out of the loss
    return [randn(batch, 3, seed=batch), labels]


def test_nonzero_indices_gather_the_labelled_rows_as_deberta_does():
    """DeBERTa's classifier loss: `(labels >= 0).nonzero()` (K rows, K known when the step runs),
    the logits and labels of those rows gathered, cross entropy over them; and nonzero of a 2-D
    mask, whose (K, 2) indices pick elements."""
    def labelled_loss(logits, labels):
        index = (labels >= 0).nonzero()  # (K, 1)
        picked = torch.gather(logits, 0, index.expand(index.size(0), logits.size(1)))  # (K, C)
        return nn.functional.cross_entropy(picked, torch.gather(labels, 0, index.view(-1)))

    assert_like_torch(Lambda(labelled_loss), _labels)

    def picked_elements(x):
        at = (x > 0).nonzero()  # (K, 2)
        return x[at[:, 0], at[:, 1]] * 2

    assert_like_torch(Lambda(picked_elements), lambda b: [randn(b, 4)])


@pytest.mark.parametrize("fn", [
    lambda x, ids: x[ids > 5].sum(0),  # a mask of both leading dims: rows of x's last dim
    lambda x, ids: x[ids[:, 0] > 4].mean(),  # a mask of the batch dim only
], ids=["two-dims", "batch-dim"])
def test_bool_mask_rows(fn):
    assert_like_torch(Lambda(fn), _eos_rows)


class AdapterPerLanguage(nn.Module):
    """X-MOD's language adapters: the rows of each language taken with a mask, put through that
    language's adapter, and written back into a zeros_like with the same mask."""

    def __init__(self):
        super().__init__()
        self.adapters = nn.ModuleList(nn.Linear(5, 5) for _ in range(3))

    def forward(self, hidden, lang):
        out = torch.zeros_like(hidden)
        for i, adapter in enumerate(self.adapters):
            mask = lang == i  # language 2 never occurs: no rows, a write of nothing
            out[mask] = adapter(hidden[mask])
        return out


def test_rows_written_back_with_a_bool_mask():
    def inputs(batch):
        return [randn(batch, 7, 5, seed=batch), torch.randint(0, 2, (batch, 7), generator=torch.Generator().manual_seed(batch))]

    assert_like_torch(AdapterPerLanguage(), inputs)


def test_rows_accumulated_with_a_bool_mask():
    def add_rows(x, ids):
        mask = ids > 5
        return torch.index_put(x, (mask,), x[mask] * 2, accumulate=True)

    assert_like_torch(Lambda(add_rows), _eos_rows)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [False, True])
def test_scatter_reduce(reduce, include_self):
    """TAPAS's segment reductions: entries of a row sent to segments (one segment left empty), with
    ties among the extremes; values and the gradients of both the base and the source."""
    def segments(x, src):
        index = torch.tensor([0, 2, 2, 0, 3, 2, 0]).expand(src.shape[0], -1)
        return x.scatter_reduce(1, index, src, reduce=reduce, include_self=include_self) * 2

    assert_like_torch(Lambda(segments), lambda b: [randn(b, 5, seed=1), (randn(b, 7, seed=2) * 2).round()])


@pytest.mark.parametrize("fn", [
    lambda x: torch.round(x * 2) + x,  # halves to even; no gradient through the rounding itself
    lambda x: torch.round(x, decimals=1) * x,
    lambda x: torch.round(x * 40, decimals=-1) + x,
], ids=["round", "decimals", "negative-decimals"])
def test_round(fn):
    assert_like_torch(Lambda(fn), lambda b: [randn(b, 4, 6) * 3])


class _Vmapped(nn.Module):
    """torch.vmap in forward, as transformers' masking utils build a mask from a per-position
    function (T5Gemma2), and over a per-row function of a parameter."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):  # x (B, 4)
        positions = torch.arange(x.shape[0])
        causal = torch.vmap(torch.vmap(lambda q, k: k <= q, in_dims=(None, 0)), in_dims=(0, None))(positions, positions)
        rows = torch.vmap(lambda row: torch.tanh(self.lin(row)) * row.sum())(x)  # (B, 4)
        return causal.float() @ rows


def test_vmap_in_forward():
    assert_like_torch(_Vmapped(), lambda b: [randn(b, 4, seed=b)])
