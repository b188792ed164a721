"""trainrt.capture: torch.nn.Module -> torch.export -> ONNX that the engine runs as torch does.

Each test captures a tiny module, checks the ModelProto with onnx.checker, runs it through
trainrt.Session (parameters, buffers, then user inputs, as numpy arrays in graph-input order) and
compares with the module's own forward, at the capture batch size and at others (symbolic batch).
"""

import copy
import re

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import _pytree as pytree

import trainrt
from trainrt.capture import CaptureError, UnsupportedATenOp, UnsupportedATenOps, capture
from trainrt.capture.export import export_program
from trainrt.capture.translator import translate

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def engine_forward(captured, module, args, kwargs=None):
    """Runs the captured model on (args, kwargs); returns (user outputs rebuilt, {buffer: new value})."""
    params = dict(module.named_parameters(remove_duplicate=False))
    buffers = dict(module.named_buffers(remove_duplicate=False))
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    assert spec == captured.in_spec
    feeds = ([params[fqn].detach().numpy() for _, fqn in captured.param_inputs]
             + [buffers[fqn].numpy() for _, fqn in captured.buffer_inputs]
             + [x.numpy() for x in leaves if isinstance(x, torch.Tensor)])
    session = trainrt.Session(captured.model.SerializeToString())
    by_name = dict(zip(session.output_names, session.run(feeds)))
    outputs = [torch.from_numpy(by_name[n]) for n in captured.outputs]
    return (pytree.tree_unflatten(outputs, captured.out_spec),
            {fqn: by_name[n] for n, fqn in captured.buffer_mutations})


def assert_like_torch(module, make_args, batches=(3, 5), dynamic=True, rtol=1e-5, atol=1e-5):
    """Captures module at batches[0]; the engine's outputs equal torch's at every batch size."""
    captured = capture(module, make_args(batches[0]), {})
    onnx.checker.check_model(captured.model, full_check=True)
    assert captured.dynamic == dynamic
    for batch in batches:
        args = make_args(batch)
        got, _ = engine_forward(captured, module, args)
        with torch.no_grad():
            want = module(*args)
        got_leaves, got_spec = pytree.tree_flatten(got)
        want_leaves, want_spec = pytree.tree_flatten(want)
        assert got_spec == want_spec
        for g, w in zip(got_leaves, want_leaves):
            assert g.dtype == w.dtype and g.shape == w.shape, f"batch {batch}"
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=atol, err_msg=f"batch {batch}")
    return captured


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + sum(shape)))


class Lambda(nn.Module):
    """A module whose forward is a function (one test module per op family)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def test_mlp_matches_torch_for_several_batch_sizes():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))
    captured = assert_like_torch(mlp, lambda b: (randn(b, 8),), batches=(4, 1, 7))
    assert [fqn for _, fqn in captured.param_inputs] == [n for n, _ in mlp.named_parameters()]
    x = captured.model.graph.input[-1]
    assert [d.dim_param or d.dim_value for d in x.type.tensor_type.shape.dim] == ["batch", 8]
    assert captured.differentiable_outputs == [True] and captured.buffer_mutations == []


def test_elementwise_arithmetic_activations_and_promotion():
    def fn(x, y, n):
        a = (x + y) * 2 - y / 3 + (1 - x) + torch.add(x, y, alpha=0.5) - torch.sub(x, y, alpha=2)
        b = torch.relu(x) + torch.sigmoid(y) + torch.tanh(x) + F.gelu(x) + F.gelu(y, approximate="tanh")
        c = F.silu(x) + torch.exp(-x.abs()) + torch.log(y.abs() + 1) + torch.sqrt(x * x + 1) + torch.rsqrt(y * y + 1)
        d = x.pow(2) + torch.pow(y.abs() + 1, x) + x.clamp(-0.5, 0.5) + F.leaky_relu(y, 0.2) + torch.erf(x)
        q = torch.div(x, y, rounding_mode="floor") + torch.div(x, y, rounding_mode="trunc")
        return a, b + c + d, q, n * 0.5 + n, n // -4, torch.div(n - 9, 4, rounding_mode="trunc")
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 6), randn(b, 6, seed=1), torch.arange(b * 6).view(b, 6)))


def test_compare_logical_where_and_masked_fill():
    def fn(x, y):
        m = (x > 0) & ~(y < 0.5) | (x == y) ^ (x >= y)
        k = torch.logical_and(x <= 0, y != 0) | torch.logical_or(x > 1, y > 1)
        return torch.where(m, x, y), x.masked_fill(k, float("-inf")), torch.where(x > 0, x, 0.0), m
    captured = assert_like_torch(Lambda(fn), lambda b: (randn(b, 5), randn(b, 5, seed=1)))
    assert captured.differentiable_outputs == [True, True, True, False]


def test_views_transposes_and_symbolic_batch_shapes():
    def fn(x):
        b = x.shape[0]
        y = x.view(b * 2, 6).t().reshape(6, b, 2).permute(1, 2, 0).transpose(0, 1).contiguous()
        z = x.unsqueeze(1).expand(-1, 3, -1, -1).flatten(1).squeeze(0).unsqueeze(-1).squeeze(-1)
        w = x.view(b, 2, 3, 2).flatten(0, 1).clone().view(-1, 6).detach()
        return y, z, w, x.new_zeros(b, 2) + torch.ones_like(x[:, :, 0]) + torch.full((b, 2), 3.0)
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 2, 6),))


def test_split_chunk_cat_stack_slice_select_and_gather():
    def fn(x, idx):
        a, b, c = x.split([2, 3, 1], dim=-1)
        p, q = x.chunk(2, dim=1)
        u, v = x.unbind(1)
        y = torch.cat([c, a, b], -1) + torch.stack([p, q], 0).sum(0)
        s = x[:, 1:, ::2] * 2 + x[:, :-1, 1::2]
        return y, s, x[:, 1], x.select(-1, -1), torch.index_select(x, 2, idx[0]), x[:, :, idx[0]], u - v
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 2, 6), torch.tensor([[5, 0, 2]] * b)))


def test_flip_reverses_each_given_dim():
    def fn(x):
        return torch.flip(x, [0]), x.flip(-1, 1), x.flip([]), x[:1].flip(0)
    captured = assert_like_torch(Lambda(fn), lambda b: (randn(b, 2, 6),))
    assert {n.op_type for n in captured.model.graph.node} >= {"Slice"}


def test_trigonometry_elementwise_min_max_and_in_place_writes():
    """sin / cos (rotary embeddings), torch.min / max of two tensors (T5's bucket clamp), and
    in-place writes that export turns into slice_scatter, select_scatter and fill (T5's shift of
    the labels into decoder inputs), negative and open-ended bounds included."""
    def fn(x, y, n):
        trig = torch.sin(x) * torch.cos(y * 40)
        ext = torch.min(x, y) + torch.maximum(x, y) + torch.minimum(x, y.abs()) - torch.max(x, 0.5 * y)
        z = x.clone()
        z[:, 1:] = y[:, :-1]
        z[:, 0] = 7.0
        z[..., -1] = y[..., 0]
        z[:, 2:-2] = x[:, 1:-3] * 2
        m = n.new_zeros(n.shape)
        m[:, 1:] = n[:, :-1].clone()
        m[:, 0] = 3
        m.masked_fill_(m == 5, 0)
        f = torch.empty_like(x).fill_(x[0, 0]).fill_(y.sum())
        return trig, ext, torch.min(n, 6 - n), z, m, f + torch.zeros_like(x).fill_(2.5)
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 6), randn(b, 6, seed=1), torch.arange(b * 6).view(b, 6) % 7))


def test_advanced_indexing_with_several_index_tensors_and_constant_pad():
    """x[i, j] with broadcasting index tensors (how transformers builds padding masks), after a
    leading full slice, with negative indices; F.pad with widths of both signs and a fill value."""
    def fn(x, mask, j):
        b = mask.shape[0]
        rows = torch.arange(b).view(b, 1, 1, 1)
        cols = torch.arange(mask.shape[1]).view(1, 1, 1, -1)
        keep = mask[rows, cols]                                       # (b, 1, 1, S)
        picked = x[:, j.view(-1, 1) - 3, j.view(1, -1)]               # (b, 2, 2, 6)
        return (keep, picked, F.pad(mask, (0, 1), value=-100), F.pad(x, (1, -2, 2, 0), value=0.5),
                F.pad(x, (0, 0, 0, 0, 1, 0)))
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 3, 4, 6), torch.arange(b * 5).view(b, 5) % 3,
                                             torch.tensor([1, 3])))


def test_reductions():
    def fn(x):
        return (x.mean(-1), x.mean((0, 2), keepdim=True), x.sum(1), x.sum(), x.amax(-1), x.max(-1).values,
                x.amin((1, 2)), x.mean(), (x > 0).sum(-1))
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 3, 4),))


def test_matmul_family_and_linear():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.fc3, self.nobias = nn.Linear(4, 5), nn.Linear(4, 5), nn.Linear(4, 5, bias=False)
            self.w, self.w45 = nn.Parameter(randn(4, 4)), nn.Parameter(randn(4, 5))

        def forward(self, x2, x3):
            a = self.fc(x2) + self.nobias(x2) + torch.addmm(self.fc.bias, x2, self.w45, beta=0.5, alpha=2.0)
            b = self.fc3(x3) + torch.bmm(x3, self.w.expand(x3.shape[0], 4, 4))[..., :1]
            c = torch.baddbmm(x3[..., :1], x3, x3.transpose(1, 2), beta=0.5, alpha=2.0) + x3 @ x3.transpose(-1, -2)
            return a, b, c, torch.mm(x2, self.w), torch.matmul(x3, self.w[0])
    torch.manual_seed(0)
    captured = assert_like_torch(M(), lambda b: (randn(b, 4), randn(b, 3, 4, seed=1)))
    ops = {n.op_type for n in captured.model.graph.node}
    assert {"Gemm", "MatMul", "Transpose"} <= ops


def test_norms_softmax_and_eval_dropout():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.drop = nn.LayerNorm(6), nn.Dropout(0.5)
            self.bare = nn.LayerNorm([2, 6], elementwise_affine=False)
            self.rms, self.rms_bare = nn.RMSNorm(6), nn.RMSNorm([2, 6], eps=1e-3, elementwise_affine=False)
            with torch.no_grad():
                self.ln.weight.uniform_(0.5, 1.5), self.ln.bias.uniform_(-1, 1), self.rms.weight.uniform_(0.5, 1.5)

        def forward(self, x):
            return (self.drop(self.ln(x)), self.bare(x), self.rms(x), self.rms_bare(x), x.softmax(-1),
                    F.log_softmax(x, dim=1))
    captured = assert_like_torch(M().eval(), lambda b: (randn(b, 2, 6),))
    assert "Dropout" not in {n.op_type for n in captured.model.graph.node}  # eval mode: identity


def test_training_dropout_keeps_the_mask_output_and_scales_kept_values():
    module = nn.Dropout(0.25).train()
    x = randn(64, 32).abs() + 1
    captured = capture(module, (x,), {})
    (dropout,) = [n for n in captured.model.graph.node if n.op_type == "Dropout"]
    assert len(dropout.output) == 2  # the engine's DropoutGrad reads the mask
    y, _ = engine_forward(captured, module, (x,))
    kept = y != 0
    np.testing.assert_allclose(y[kept].numpy(), (x[kept] / 0.75).numpy(), rtol=1e-6)
    assert 0.2 < 1 - kept.float().mean().item() < 0.3


def test_scaled_dot_product_attention_causal_and_masks():
    def fn(q, k, v, bias):
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        boolean = F.scaled_dot_product_attention(q, k, v, attn_mask=bias > 0)
        additive = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)
        return causal, boolean, additive
    masks = randn(5, 5, seed=3)
    masks.fill_diagonal_(1.0)
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 2, 5, 4), randn(b, 2, 5, 4, seed=1),
                                              randn(b, 2, 5, 4, seed=2), masks))


def test_losses():
    weight = torch.tensor([1.0, 2.0, 0.5, 1.5])

    def fn(logits, target, y):
        return (F.cross_entropy(logits, target), F.cross_entropy(logits, target, reduction="sum", weight=weight),
                F.cross_entropy(logits, target, reduction="none", ignore_index=2),
                F.nll_loss(F.log_softmax(logits, -1), target), F.mse_loss(logits, y),
                F.mse_loss(logits, y, reduction="sum"))
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 4), torch.arange(b) % 4, randn(b, 4, seed=1)))


def test_factories_arange_casts_and_triangles():
    def fn(x, t):
        b, n = x.shape
        pos = torch.arange(b).float()[:, None] + torch.arange(n) * 0.5 + torch.arange(1, 2 * n + 1, 2)
        tri = torch.tril(torch.ones(n, n)) - torch.triu(x[:1].expand(n, n), 1)
        casts = x.to(torch.float64), t.type_as(x) + x, (x > 0).to(torch.int32), torch.zeros(b, dtype=torch.int64)
        return (pos + x, tri, torch.tril(x, -1)) + casts
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 4), torch.arange(b * 4).view(b, 4) % 3))


class TinyGPT(nn.Module):
    """Token + position embedding, pre-LayerNorm causal self-attention (matmul + masked_fill +
    softmax), GELU MLP, residuals, output head tied to the token embedding, cross-entropy loss."""

    def __init__(self, vocab=23, block=8, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.fc_out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.register_buffer("causal", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(t))  # (B, T, C)
        c = x.shape[-1]
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        att = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5  # (B, H, T, T)
        att = att.masked_fill(self.causal[:, :, :t, :t] == 0, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))
        x = x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        logits = self.head(self.ln_f(x))  # (B, T, V)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def test_gpt_block_logits_and_loss_equal_torch():
    torch.manual_seed(0)
    gpt = TinyGPT()

    def batch(b):
        g = torch.Generator().manual_seed(b)
        return torch.randint(0, 23, (b, 8), generator=g), torch.randint(0, 23, (b, 8), generator=g)
    captured = assert_like_torch(gpt, batch, batches=(4, 2, 6))
    fqns = [fqn for _, fqn in captured.param_inputs]
    assert len(fqns) == len(set(fqns)) == len(list(gpt.parameters()))  # the tied weight appears once
    assert captured.buffer_inputs == [("b_causal", "causal")] and captured.differentiable_outputs == [True, True]


def test_core_aten_form_translates_too():
    """The decomposed IR (run_decompositions(): native_layer_norm, _softmax, addmm, bmm, gather,
    _log_softmax + nll_loss_forward) gives the same logits and loss as the training IR."""
    torch.manual_seed(0)
    gpt = TinyGPT()
    args = (torch.randint(0, 23, (4, 8)), torch.randint(0, 23, (4, 8)))
    ep = export_program(gpt, args, {}, "all")
    ep = ep.run_decompositions()
    assert "aten.native_layer_norm.default" in {str(n.target) for n in ep.graph.nodes}
    translation = translate(ep, ["idx", "targets"], "batch", "TinyGPT")
    onnx.checker.check_model(translation.model, full_check=True)
    params = dict(gpt.named_parameters(remove_duplicate=False))
    feeds = ([params[fqn].detach().numpy() for _, fqn in translation.param_inputs]
             + [gpt.causal.numpy()] + [a.numpy() for a in args])
    logits, loss = trainrt.Session(translation.model.SerializeToString()).run(feeds)
    want_logits, want_loss = gpt(*args)
    np.testing.assert_allclose(logits, want_logits.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss, want_loss.item(), rtol=1e-5)


def test_tensor_constants_become_initializers():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.tensor([0.5, 2.0, -1.0])  # neither parameter nor buffer: a lifted constant

        def forward(self, x):
            return x * self.scale

    captured = assert_like_torch(Scaled(), lambda b: (randn(b, 3),))
    assert captured.param_inputs == [] and captured.buffer_inputs == []
    assert len(captured.model.graph.input) == 1 and len(captured.model.graph.initializer) == 1


def test_nested_inputs_and_outputs_keep_their_structure():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, pair, scale, extra=None, *, table):
            a, b = pair
            y = self.fc(a * scale + b) + table["bias"]
            return {"y": y, "parts": (a - b, table["ids"] * 2)}

    module = M()
    args = lambda b: ((randn(b, 3), randn(b, 3, seed=1)), 2.0)  # noqa: E731
    kwargs = lambda b: {"table": {"ids": torch.arange(b), "bias": randn(2)}}  # noqa: E731
    captured = capture(module, args(4), kwargs(4))
    assert captured.dynamic and captured.non_tensor_inputs == [2.0]
    assert captured.user_inputs == ["pair_0", "pair_1", "table_ids", "table_bias"]
    assert captured.differentiable_outputs == [True, True, False]
    for b in (4, 6):
        got, _ = engine_forward(captured, module, args(b), kwargs(b))
        want = module(*args(b), **kwargs(b))
        assert set(got) == {"y", "parts"} and isinstance(got["parts"], tuple)
        np.testing.assert_allclose(got["y"].numpy(), want["y"].detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got["parts"][1].numpy(), want["parts"][1].numpy())


def test_buffer_updates_are_recorded_as_mutations():
    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
            self.register_buffer("running_mean", torch.zeros(4))

        def forward(self, x):
            self.steps.add_(1)
            self.running_mean.mul_(0.9).add_(0.1 * x.detach().mean(0))
            return x - self.running_mean

    module = Counting()
    x = randn(5, 4)
    captured = capture(module, (x,), {})
    assert [fqn for _, fqn in captured.buffer_mutations] == ["steps", "running_mean"]
    assert [fqn for _, fqn in captured.buffer_inputs] == ["steps", "running_mean"]
    got, new_buffers = engine_forward(captured, module, (x,))
    want = module(x)  # updates the buffers in place
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert new_buffers["steps"] == 1
    np.testing.assert_allclose(new_buffers["running_mean"], module.running_mean.numpy(), rtol=1e-6)
    graph_outputs = [o.name for o in captured.model.graph.output]
    assert graph_outputs[:2] == [n for n, _ in captured.buffer_mutations]


@pytest.mark.parametrize("train", [True, False])
def test_batch_norm_output_and_running_stats_equal_torch(train):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, momentum=0.3), nn.ReLU()).train(train)
    bn = model[1]
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.uniform_(0.5, 2)
    captured = capture(model, (randn(5, 4),), {})
    assert captured.dynamic
    assert [fqn for _, fqn in captured.buffer_mutations] == (
        ["1.running_mean", "1.running_var", "1.num_batches_tracked"] if train else [])
    for batch in (5, 8):
        x = randn(batch, 4)
        got, new_buffers = engine_forward(captured, model, (x,))
        want = model(x)  # in training, updates the running stats in place
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
        for fqn, value in new_buffers.items():
            np.testing.assert_allclose(value, model.get_buffer(fqn).numpy(), rtol=1e-5, atol=1e-6)


def test_a_model_that_pins_the_batch_keeps_that_dim_static():
    module = Lambda(lambda x: x.view(4, 3, 2).sum(-1))
    captured = assert_like_torch(module, lambda b: (randn(b, 6),), batches=(4,))
    assert captured.input_dims[0][0] == 4 and captured.accepts([(4, 6)]) and not captured.accepts([(5, 6)])
    assert not capture(module, (randn(4, 6),), {}, symbolic_dims=False).dynamic


class CumProd(nn.Module):
    def forward(self, x):
        return torch.cumprod(x, 0) * 2


def test_unsupported_op_names_the_op_the_node_and_the_source_line():
    with pytest.raises(UnsupportedATenOp, match=r"aten\.cumprod\.default \(node 'cumprod', from .*test_capture\.py:\d+ "
                                                r"`return torch\.cumprod\(x, 0\) \* 2`\) has no TrainRT translation"):
        capture(CumProd(), (randn(3, 4),), {})


class SeveralGaps(nn.Module):
    def forward(self, x):
        a = torch.cumprod(x, 0)
        b = torch.special.bessel_j0(a)  # reads an untranslated value: still reported
        c = torch.cumprod(x, 1) + torch.special.bessel_y0(x.abs() + 1)
        return a.relu() + b + c + torch.cumprod(x.t(), 0).t()


def test_every_unsupported_op_of_the_graph_is_reported_at_once():
    with pytest.raises(UnsupportedATenOps) as info:
        capture(SeveralGaps(), (randn(3, 4),), {})
    lines = str(info.value).splitlines()
    assert lines[0] == "3 ATen ops of the graph cannot be translated (5 nodes):"
    assert re.fullmatch(r"  aten\.cumprod\.default x3 \(node 'cumprod', from .*test_capture\.py:\d+ "
                        r"`a = torch\.cumprod\(x, 0\)`; also 'cumprod_1', 'cumprod_2'\) has no TrainRT translation",
                        lines[1]), lines[1]
    assert re.fullmatch(r"  aten\.special_bessel_j0\.default \(node 'special_bessel_j0', from .*test_capture\.py:\d+ "
                        r"`b = .*`\) has no TrainRT translation", lines[2]), lines[2]
    assert re.fullmatch(r"  aten\.special_bessel_y0\.default \(node 'special_bessel_y0', .*\) has no TrainRT translation.*",
                        lines[3]), lines[3]
    assert len(lines) == 4
    assert [e.node_name for e in info.value.errors] == ["cumprod", "special_bessel_j0", "cumprod_1", "special_bessel_y0",
                                                        "cumprod_2"]
    assert info.value.op == "aten.cumprod.default"  # the first one, as a single-op error has it


@pytest.mark.parametrize("module, inputs, message", [
    (nn.Embedding(5, 3, scale_grad_by_freq=True), (torch.tensor([[0, 1], [2, 3]]),), "scale_grad_by_freq"),
    (Lambda(lambda x, i: x[i, :, i]), (randn(3, 4, 5), torch.tensor([0, 2])), "non-adjacent"),
    (nn.Embedding(5, 3, sparse=True), (torch.tensor([[0, 1], [2, 3]]),), "sparse"),
    (Lambda(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1)), (randn(3, 4), torch.tensor([0, 1, 2])),
     "label_smoothing=0.1"),
    (Lambda(lambda x: torch.linalg.vector_norm(x, ord=3)), (randn(3, 4),), "ord=3"),
])
def test_unsupported_forms_raise_with_the_reason(module, inputs, message):
    with pytest.raises(UnsupportedATenOp, match=message):
        capture(module, inputs, {})


class NoGradRegion(nn.Module):
    def forward(self, x):
        with torch.no_grad():
            y = x * 2
        return x + y


def test_no_grad_regions_are_translated_in_place_behind_stop_gradient():
    """export keeps the block as a wrap_with_set_grad_enabled HOP; its body is translated and its
    output stops the gradient (test_capture_composed_ops compares the gradient with torch's)."""
    captured = assert_like_torch(NoGradRegion(), lambda b: (randn(b, 4),))
    assert any(n.op_type == "StopGradient" for n in captured.model.graph.node)


def test_export_failures_are_capture_errors():
    def data_dependent(x):
        return x[x > 0].sum() if x.sum() > 0 else x
    with pytest.raises(CaptureError, match="torch.export failed"):
        capture(Lambda(data_dependent), (randn(3, 4),), {})


def test_functionalization_failures_are_capture_errors(monkeypatch):
    """torch's retrace of a graph with in-place ops fails on some models (Falcon: 'Constant tensor
    lifted_tensor_0 is not in the constants dictionary'); capture reports it as an export failure."""
    def refuse(self, *args, **kwargs):
        raise RuntimeError("Constant tensor lifted_tensor_0 is not in the constants dictionary.")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", refuse)
    bn = nn.BatchNorm1d(4)  # called twice: each running stat written twice, which only the retrace functionalizes
    with pytest.raises(CaptureError, match="torch.export failed .* functionalizing .* lifted_tensor_0"):
        capture(nn.Sequential(bn, bn).train(), (randn(3, 4),), {})


class StateCache:
    """A cache class of a model's own (MiniMax's, or a DynamicCache of linear-attention layers):
    no pytree flattening, so torch.export cannot return it."""

    def __init__(self, state):
        self.state = state


class CachingModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, use_cache=None):
        h = torch.tanh(self.proj(x))
        loss = h.square().mean()
        return (loss,) if use_cache is False else (loss, StateCache(h.detach()))  # a ModelOutput drops None


class CachingHead(nn.Module):
    """A task head that hands **kwargs on to its base model (Qwen3.5's sequence classifier)."""

    def __init__(self):
        super().__init__()
        self.base = CachingModel()

    def forward(self, x, **kwargs):
        return self.base(x, **kwargs)


@pytest.mark.parametrize("make", [CachingModel, CachingHead], ids=["use_cache-argument", "through-kwargs"])
def test_a_cache_that_cannot_be_flattened_is_captured_without_it(make, monkeypatch, trainrt_log):
    """Capture exports again with use_cache=False, says so, and trains as eager does."""
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    torch.manual_seed(0)
    eager = make()
    ours = trainrt.RTModule(make())
    ours.load_state_dict(eager.state_dict())
    x = torch.randn(3, 4)
    got = ours(x)
    assert ours.fallback_reason is None and len(got) == 1
    assert any("use_cache=False" in r.getMessage() and make.__name__ in r.getMessage() for r in trainrt_log.records)
    want = eager(x)
    torch.testing.assert_close(got[0], want[0])
    got[0].backward()
    want[0].backward()
    for (name, pe), (_, po) in zip(eager.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(po.grad, pe.grad, msg=name)


TRACED_PAST_CACHE = []


class LinearAttentionCaching(nn.Module):
    """Qwen3.5's model: a DynamicCache of a linear-attention and a full-attention layer, made
    before the layers run and returned, which transformers' flattening refuses."""

    def __init__(self):
        super().__init__()
        from transformers import Qwen3_5TextConfig

        self.config = Qwen3_5TextConfig(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])
        self.proj = nn.Linear(4, 4)

    def forward(self, x, use_cache=None):
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache(config=self.config) if use_cache is not False else None
        TRACED_PAST_CACHE.append(use_cache)  # export restores the module's own attributes
        loss = torch.tanh(self.proj(x)).square().mean()
        return (loss,) if cache is None else (loss, cache)


def test_a_linear_attention_cache_fails_export_as_it_is_made():
    """The export with the cache stops where the cache is made, not after the whole trace
    (export.py): the forward runs past it once, in the export with use_cache=False."""
    TRACED_PAST_CACHE.clear()
    captured = capture(LinearAttentionCaching(), (randn(3, 4),), {})
    assert TRACED_PAST_CACHE == [False] and len(captured.outputs) == 1


def test_a_cache_the_caller_asked_for_fails_export_naming_it():
    with pytest.raises(CaptureError, match="StateCache"):
        capture(CachingModel(), (torch.randn(3, 4),), {"use_cache": True})


class _RouterConvertingItsClassifier(nn.Module):
    """Switch Transformers' router: forward converts its classifier to float32, which it already is."""

    def __init__(self):
        super().__init__()
        self.classifier = nn.Linear(8, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        self.classifier = self.classifier.to(torch.float32)
        return self.out(torch.softmax(self.classifier(x), -1)).sum()


def test_a_conversion_in_forward_that_changes_nothing_is_captured(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    torch.manual_seed(0)
    eager = _RouterConvertingItsClassifier()
    ours = trainrt.RTModule(copy.deepcopy(eager))
    x = torch.randn(5, 8)
    eager(x).backward()
    loss = ours(x)
    loss.backward()
    assert ours.fallback_reason is None
    assert torch.nn.Module.to is not trainrt.capture.module_conversions._to_unless_unchanged  # restored
    torch.testing.assert_close(loss, eager(x))
    for (name, p), q in zip(eager.named_parameters(), ours.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


def test_a_conversion_in_forward_that_changes_the_dtype_is_left_to_torch():
    module = nn.Linear(2, 2)
    with trainrt.capture.module_conversions.unchanged_conversions_skipped():
        assert module.to(torch.float32) is module
        assert module.to("cpu") is module
        assert module.to(torch.float64).weight.dtype == torch.float64  # a real conversion still happens
