"""In-place writes of tensors the forward just made, and BatchNorm's writes of its buffers, become
functional ops before any retrace (capture/inplace.py): the graph keeps no mutable op, RTModule
trains as eager with fallback disabled (running stats written back), and writes that another
alias could see are left to torch's functionalization."""

import copy

import pytest
import torch
from torch import nn

import trainrt
from trainrt.capture.autograd_function import FunctionCapture
from trainrt.capture.export import _export
from trainrt.capture.inplace import functionalize_buffer_writes, functionalize_fresh_writes


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class ScaledEmbedding(nn.Module):
    """CTRL's `inputs_embeds *= sqrt(d)` and Falcon's `mlp_output += attention_output`."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.proj = nn.Linear(4, 4)

    def forward(self, ids):
        x = self.embed(ids)
        x *= 2.0
        y = self.proj(x)
        y += x
        return y


class ExpertsInto(nn.Module):
    """An MoE's rows written into an empty_like by index_put_."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        out = torch.empty_like(x)
        order = torch.tensor([2, 0, 1])
        out[order] = self.proj(x[torch.tensor([0, 1, 2])])
        return out


class HalvesCopiedIn(nn.Module):
    """DeepSeek's keys: a new_empty whose two halves are written by copy_ through slices, and a
    column scaled in place through select."""

    def forward(self, a, b):
        k = a.new_empty(a.shape[0], 3, 6)
        k[..., :4].copy_(a)
        k[..., 4:].copy_(b * 2)
        k[:, 1].mul_(3.0)
        return k * 2


class WriteThroughTranspose(nn.Module):
    """A write through another kind of view of a fresh tensor is left to torch's functionalization."""

    def forward(self, x):
        y = x * 2
        y.t().add_(1.0)
        return y


class RowsUpdatedInPlace(nn.Module):
    """The chunked delta rule of linear attention (Kimi, Bailing, OLMo-hybrid): each row of a fresh
    (n, n) matrix updated in place from the rows above it, then read back through slices, whose
    shapes are the whole matrix's, not the written row's."""

    def forward(self, x):
        a = -(x @ x.transpose(-1, -2)).tril(-1)
        for i in range(1, a.shape[-1]):
            row, above = a[..., i, :i].clone(), a[..., :i, :i].clone()
            a[..., i, :i] = row + (row.unsqueeze(-1) * above).sum(-2)
        return a[..., :, 1:] * 2 + a.sum(-1, keepdim=True)


class InterleavedRope(nn.Module):
    """Qwen3.5's interleaved mrope: rows 1 and 2 of a fresh (3, B, D) tensor written into row 0
    through slices of the one view `freqs[0]`, then the whole tensor read again."""

    def forward(self, x):
        freqs = torch.stack([x, x * 2, x * 3]) * 1.0
        freqs_t = freqs[0]
        for dim, offset in enumerate((1, 2), start=1):
            idx = slice(offset, 7, 3)
            freqs_t[..., idx] = freqs[dim, ..., idx]
        return freqs_t.sin() * 2 + freqs.sum(0)


class BucketsUnderNoGrad(nn.Module):
    """CPM-Ant's relative-position buckets: `buckets += where(...)` on a fresh int tensor inside a
    torch.no_grad() block, which export keeps as a subgraph of its own (wrap_with_set_grad_enabled)."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Embedding(8, 4)

    def forward(self, x):
        with torch.no_grad():
            pos = torch.arange(x.shape[1])
            rel = pos[None, :] - pos[:, None]
            buckets = (rel > 0).to(torch.int32) * 4
            buckets += torch.where(rel.abs() < 2, rel.abs().to(torch.int32), torch.full_like(buckets, 3))
        return x + self.bias(buckets).sum(-1)


def _mutable_ops(module, *args):
    """(whether the rewrite changed the graph, the in-place ops left but detach_, which changes
    autograd metadata only and which export.py does not functionalize)."""
    ep = _export(module, args, {}, None, FunctionCapture())
    changed = functionalize_fresh_writes(ep.graph)
    ops = [n.target for n in ep.graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
           and n.target._schema.is_mutable and n.target != torch.ops.aten.detach_.default]
    return changed, ops


def test_writes_of_fresh_tensors_become_functional():
    assert _mutable_ops(ScaledEmbedding(), torch.tensor([[1, 2, 3]])) == (True, [])
    assert _mutable_ops(ExpertsInto(), torch.randn(3, 4)) == (True, [])
    assert _mutable_ops(HalvesCopiedIn(), torch.randn(2, 3, 4), torch.randn(2, 3, 2)) == (True, [])
    assert _mutable_ops(InterleavedRope(), torch.randn(2, 8)) == (True, [])


def test_a_write_through_another_view_is_left_in_place():
    changed, ops = _mutable_ops(WriteThroughTranspose(), torch.randn(3, 4))
    assert not changed and ops


@pytest.mark.parametrize("make, inputs", [
    (ScaledEmbedding, lambda: [torch.tensor([[1, 2, 3], [4, 5, 0]])]),
    (ExpertsInto, lambda: [torch.randn(3, 4)]),
    (HalvesCopiedIn, lambda: [torch.randn(2, 3, 4), torch.randn(2, 3, 2)]),
    (WriteThroughTranspose, lambda: [torch.randn(3, 4)]),
    (RowsUpdatedInPlace, lambda: [torch.randn(2, 4, 3) * 0.5]),
    (BucketsUnderNoGrad, lambda: [torch.randn(5, 5)]),
    (InterleavedRope, lambda: [torch.randn(2, 8)]),
], ids=["scaled-embedding", "experts", "halves", "through-transpose", "rows-updated", "under-no-grad",
        "interleaved-rope"])
def test_trains_as_eager(make, inputs):
    torch.manual_seed(0)
    eager = make()
    ours = trainrt.RTModule(copy.deepcopy(eager))
    args = inputs()
    grads = []
    for model in (eager, ours):
        xs = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
        out = model(*xs)
        (out * torch.arange(out.numel()).reshape(out.shape)).sum().backward()
        grads.append((out.detach(), [x.grad for x in xs], [p.grad for p in model.parameters()]))
    (out_e, xg_e, pg_e), (out_o, xg_o, pg_o) = grads
    torch.testing.assert_close(out_o, out_e)
    for g_o, g_e in zip(xg_o + pg_o, xg_e + pg_e):
        torch.testing.assert_close(g_o, g_e)


class ShiftRight(nn.Module):
    """BART's shift_tokens_right: writes through a slice of a slice and a select of a slice of a
    new_zeros, then masked_fill_ of it; and router weights (max's values) normalized in place."""

    def forward(self, ids, x):
        shifted = ids.new_zeros(ids.shape)
        shifted[:, 1:] = ids[:, :-1].clone()
        shifted[:, 0] = 2
        shifted.masked_fill_(shifted == -100, 1)
        weights = torch.softmax(x, -1).max(-1, keepdim=True).values  # an output of a multi-output op
        weights /= weights.sum(-1, keepdim=True) + 1
        return x * shifted.unsqueeze(-1) * weights


class ShiftRightInPlace(nn.Module):
    """PLBart's shift: the clone is read through views of itself before it is written through others."""

    def forward(self, ids, x):
        shifted = ids.clone()
        shifted.masked_fill_(shifted == -100, 1)
        last = shifted.gather(1, (shifted.ne(1).sum(1) - 1).unsqueeze(-1)).squeeze(-1)
        shifted[:, 1:] = shifted[:, :-1].clone()
        shifted[:, 0] = last
        return x * shifted.unsqueeze(-1)


@pytest.mark.parametrize("make", [ShiftRight, ShiftRightInPlace])
def test_writes_through_chains_of_slices_become_functional(make):
    ids = torch.tensor([[5, 6, -100, 7], [8, -100, 9, 3]])
    assert _mutable_ops(make(), ids, torch.randn(2, 4, 3)) == (True, [])
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3)
    torch.testing.assert_close(trainrt.RTModule(make())(ids, x), make()(ids, x))


class NormedTwice(nn.Module):
    """BatchNorm in training (running stats and num_batches_tracked written in place), a buffer
    read after its write, and a BatchNorm without running stats beside it."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4, momentum=0.3)  # no bias: BatchNorm zeroes its gradient
        self.plain = nn.BatchNorm2d(4, track_running_stats=False)

    def forward(self, x):  # x: (B, 3, H, W)
        y = self.bn(self.conv(x))
        return (y + self.plain(y).square()) * self.bn.num_batches_tracked  # the count after its update, as eager


class SharedBatchNorm(nn.Module):
    """One BatchNorm called twice: two writes of each buffer, left to run_decompositions."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.bn(x) * 2)


def _buffer_writes(module, *inputs):
    """(whether functionalize_buffer_writes changed the graph, its mutable ops after, its buffer mutations)."""
    ep = _export(module, inputs, {}, None, FunctionCapture())
    changed = functionalize_buffer_writes(ep)
    ops = [n.target for n in ep.graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
           and (n.target._schema.is_mutable or n.target == torch.ops.aten.batch_norm.default and n.args[5])]
    mutations = sorted(s.target for s in ep.graph_signature.output_specs if s.kind.name == "BUFFER_MUTATION")
    return changed, ops, mutations


def test_batch_norm_buffer_writes_become_functional_outputs():
    changed, ops, mutations = _buffer_writes(NormedTwice(), torch.randn(2, 3, 6, 6))
    assert changed and ops == [torch.ops.aten.batch_norm.default]  # the one without running stats stays
    assert mutations == ["bn.num_batches_tracked", "bn.running_mean", "bn.running_var"]
    changed, ops, mutations = _buffer_writes(SharedBatchNorm(), torch.randn(5, 4))
    assert not changed and len(ops) == 4 and mutations == []


@pytest.mark.parametrize("make, shape", [(NormedTwice, (2, 3, 6, 6)), (SharedBatchNorm, (5, 4))],
                         ids=["normed", "shared"])
def test_batch_norm_trains_as_eager_and_writes_back_its_buffers(make, shape, monkeypatch):
    retraces = []
    real = torch.export.ExportedProgram.run_decompositions
    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions",
                        lambda self, *a, **k: retraces.append(1) or real(self, *a, **k))
    torch.manual_seed(0)
    eager = make()
    ours = trainrt.RTModule(copy.deepcopy(eager))
    for step in range(2):
        x = torch.randn(shape)
        for model in (eager, ours):
            model.zero_grad()
            model(x).square().sum().backward()
        assert ours.fallback_reason is None
        for (name, b_e), (_, b_o) in zip(eager.named_buffers(), ours.named_buffers()):
            torch.testing.assert_close(b_o, b_e, rtol=1e-5, atol=1e-6, msg=name)
        for (name, p_e), (_, p_o) in zip(eager.named_parameters(), ours.named_parameters()):
            torch.testing.assert_close(p_o.grad, p_e.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert len(retraces) == (make is SharedBatchNorm)
