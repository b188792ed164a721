"""The ops of mixture-of-experts layers, as engine ops, through RTModule against torch: forward
values and the gradients of loss = sum(output * w), with fallback disabled.

topk and sort (the engine's TopK: ties in index order, NaN above every number),
histc (bins from linspace edges, counted), scatter with a value or a src (Where over a one-hot
of the index), index_put of integers (an inverse permutation), transformers' grouped matmul
(one MatMul against every expert, each row keeping its own), and the grouped_mm experts layer of
transformers that uses them all; index_add (ScatterElements with reduction add) and a split by
per-expert counts read with .tolist() (sizes known when the step runs), JetMoE's experts. Each
module runs at two batch sizes on one capture.
"""

import copy

import pytest
import torch
from torch import nn

import trainrt
from test_capture_composed_ops import Lambda, as_float, assert_like_torch, randn


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def with_indices(op):
    """values * (1 + indices): a float output that reads both, so a wrong index shows in the
    values and the gradient."""
    return lambda x: (lambda r: r[0] * (1 + r[1]))(op(x))


@pytest.mark.parametrize("fn", [
    lambda x: torch.topk(x, 2),
    lambda x: torch.topk(x, 3, dim=1),  # not the last dim
    lambda x: torch.topk(x, 2, largest=False),
    lambda x: torch.topk(x, 3, dim=0),  # along the symbolic batch
    lambda x: torch.topk(x.softmax(-1), 2, dim=-1, sorted=False),  # a router's top-k, as Mixtral's
], ids=["largest", "dim1", "smallest", "batch", "router"])
def test_topk(fn):
    assert_like_torch(Lambda(with_indices(fn)), lambda b: [randn(b, 5, 6)])


@pytest.mark.parametrize("fn", [
    lambda x: torch.sort(x),
    lambda x: torch.sort(x, dim=1, descending=True),
    lambda x: torch.sort(x, dim=0),  # along the symbolic batch
    lambda x: torch.sort(x, stable=True, dim=-1),
], ids=["ascending", "descending-dim1", "batch", "stable"])
def test_sort(fn):
    assert_like_torch(Lambda(with_indices(fn)), lambda b: [randn(b, 5, 6)])


@pytest.mark.parametrize("descending", [False, True])
def test_sort_keeps_ties_in_index_order(descending):
    """Expert ids tie everywhere; a stable order is torch's on the CPU."""
    assert_like_torch(Lambda(with_indices(lambda x: torch.sort(x, -1, descending))),
                      lambda b: [(randn(b, 9) * 2).round()])


def test_sort_orders_nan_above_every_number_as_torch():
    def inputs(b):
        x = randn(b, 7)
        x[0, 2] = x[1, 5] = x[1, 0] = float("nan")
        return [x]

    ours = trainrt.RTModule(Lambda(lambda x: torch.sort(x, -1, True).indices.float() + 0 * torch.where(x == x, x, 0).sum()))
    for b in (3, 4):
        (x,) = inputs(b)
        torch.testing.assert_close(ours(x), torch.sort(x, -1, True).indices.float())
        assert ours.fallback_reason is None


def test_sort_of_integer_expert_ids():
    """grouped_mm experts sort the flattened top-k ids (int64) and gather tokens by the order."""
    def route(x, ids):
        order, perm = torch.sort(ids.reshape(-1))
        return x.repeat_interleave(2, 0)[perm] * (1 + order.unsqueeze(-1))

    def inputs(b):
        return [randn(b, 4), torch.randint(0, 3, (b, 2), generator=torch.Generator().manual_seed(b))]

    assert_like_torch(Lambda(route), inputs)


class TopKAndIndexFeature(nn.Module):
    """torch.topk's values and indices, and a Linear of the indices: a differentiable output even
    for integer inputs."""

    def __init__(self, k: int, largest: bool, sorted_: bool):
        super().__init__()
        self.k, self.largest, self.sorted = k, largest, sorted_
        self.scale = nn.Linear(1, 1)

    def forward(self, x):
        values, indices = torch.topk(x, self.k, largest=self.largest, sorted=self.sorted)
        return values, indices, self.scale(indices.unsqueeze(-1).float())


@pytest.mark.parametrize("n, k", [(4, 2), (9, 3), (9, 9), (130, 2), (200, 1), (64, 1), (65, 1)],
                         ids=["4-2", "9-3", "9-all", "130-2", "200-1", "64-1", "65-1"])  # both of torch's paths: k * 64 <= n or not
@pytest.mark.parametrize("largest, sorted_", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_topk_of_ties_picks_the_indices_torch_picks(n, k, largest, sorted_, dtype):
    """Lines of ties (all equal, a few levels, NaNs): the same values and indices as torch's CPU
    topk, in its order, and the gradient reaches the elements torch's reaches (AFMoE's router
    scores are all 0.5 at initialization: eager routes every token to the last experts)."""
    g = torch.Generator().manual_seed(n * 10 + k)
    x = torch.cat([torch.zeros(1, n), torch.randint(0, 3, (5, n), generator=g).float()])
    if dtype.is_floating_point:
        x[3, ::3] = float("nan")
    x = x.to(dtype)
    model = trainrt.RTModule(TopKAndIndexFeature(k, largest, sorted_))
    xa = x.clone().requires_grad_(dtype.is_floating_point)
    values, indices, _ = model(xa)
    assert model.fallback_reason is None
    want = torch.topk(x, k, largest=largest, sorted=sorted_)
    assert torch.equal(indices, want.indices), (indices, want.indices)
    torch.testing.assert_close(values, want.values, equal_nan=True)
    if dtype.is_floating_point:
        values.float().nan_to_num().sum().backward()
        xe = x.clone().requires_grad_()
        torch.topk(xe, k, largest=largest, sorted=sorted_).values.float().nan_to_num().sum().backward()
        assert torch.equal(xa.grad, xe.grad)


@pytest.mark.parametrize("bins, low, high, scale", [
    (4, 0, 3, None),  # expert ids as floats, one bin each: the MoE count
    (5, -1.0, 1.5, 1.0),  # elements outside [min, max] left out
    (1, -2.0, 2.0, 1.0),
    (6, 0, 0, 1.0),  # min == max: the data's range
    (4, 0, 0, None),
    (1, 0, 0, 1.0),  # one expert: HunYuan's tiny MoE
], ids=["expert-counts", "general", "one-bin", "data-range", "data-range-ids", "data-range-one-bin"])
def test_histc(bins, low, high, scale):
    def inputs(b):
        g = torch.Generator().manual_seed(b)
        x = torch.randint(0, 4, (b, 6), generator=g).float() if scale is None else torch.randn(b, 6, generator=g)
        if low < high:
            x[0, :2] = torch.tensor([low, high], dtype=x.dtype)  # the edges themselves
            x[1, :bins - 1] = torch.linspace(low, high, bins + 1)[1:-1]
        elif scale is not None:  # the data's range [-3, 3], and its edges
            x = x.clamp(-2.5, 2.5)
            x[0, :2] = torch.tensor([-3.0, 3.0])
            x[1, :bins - 1] = torch.linspace(-3.0, 3.0, bins + 1)[1:-1]
        return [x]

    def count(x):
        return torch.histc(x, bins=bins, min=low, max=high).sum() * x + torch.histc(x, bins, low, high)[0] * x

    assert_like_torch(Lambda(count), inputs)
    for b in (3, 5):  # the counts themselves
        (x,) = inputs(b)
        ours = trainrt.RTModule(Lambda(lambda x: torch.histc(x, bins, low, high) + 0 * x.sum()))
        torch.testing.assert_close(ours(x.requires_grad_()), torch.histc(x.detach(), bins, low, high))


def _scatter_value(x, index):
    return x.scatter(1, index, 1.5)


def _scatter_src(x, index):
    return x.scatter(0, index, x.flip(0) * 3)


def _group_mask(scores, _):
    """DeepSeek-V3's router: the best 2 of 4 expert groups marked with ones by scatter."""
    groups = scores.view(scores.shape[0], 4, 2).topk(2, dim=-1)[0].sum(-1)  # (b, 4)
    chosen = torch.topk(groups, k=2, dim=-1, sorted=False)[1]
    mask = torch.zeros_like(groups).scatter_(1, chosen, 1)
    return scores * mask.repeat_interleave(2, dim=1)


def _distinct_rows(b):
    return torch.stack([torch.randperm(6, generator=torch.Generator().manual_seed(i))[:3] for i in range(b)])


@pytest.mark.parametrize("fn, inputs", [
    (_scatter_value, lambda b: [randn(b, 6), _distinct_rows(b)]),
    (lambda x, i: x.scatter(-1, i, -2.0), lambda b: [randn(b, 2, 6), _distinct_rows(2 * b).view(b, 2, 3)]),
    (_scatter_src, lambda b: [randn(b, 4), torch.stack([torch.randperm(b)] * 4, 1)]),
    (_group_mask, lambda b: [randn(b, 8), None]),
], ids=["value", "value-last-dim", "src-batch-dim", "router-group-mask"])
def test_scatter(fn, inputs):
    assert_like_torch(Lambda(lambda x, i=None: fn(x, i)), lambda b: [t for t in inputs(b) if t is not None])


def test_index_put_of_an_inverse_permutation():
    """grouped_mm experts undo their sort with `inv[perm] = arange`, on int64."""
    def unsort(x):
        perm = torch.sort(x[:, 0])[1]
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.shape[0])
        return x[perm][inv] * (1 + inv.unsqueeze(-1))

    assert_like_torch(Lambda(unsort), lambda b: [randn(b, 3)])


class GroupedLinear(nn.Module):
    """transformers' grouped_mm_fallback of rows sorted by expert against (E, I, O) weights."""

    def __init__(self, experts=4, width_in=5, width_out=3):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(experts, width_in, width_out))

    def forward(self, x, counts):
        return torch.ops.transformers.grouped_mm_fallback(x, self.weight, torch.cumsum(counts, 0, dtype=torch.int32))


def test_grouped_mm_fallback():
    pytest.importorskip("transformers.integrations.moe")  # registers transformers::grouped_mm_fallback

    def inputs(b):
        counts = torch.tensor([b, 0, 2 * b - 1, 1])  # an expert without rows, and rows past the last
        return [randn(4 * b + 2, 5, seed=b), counts]

    assert_like_torch(GroupedLinear(), inputs, rtol=1e-4, atol=1e-5)


def test_grouped_mm_experts_layer_of_qwen3_moe():
    """A whole sparse MoE block as transformers runs it on the CPU: router softmax, topk, sort,
    histc, two grouped matmuls, the inverse permutation and the per-token sum."""
    pytest.importorskip("transformers")
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    config = Qwen3MoeConfig(hidden_size=16, moe_intermediate_size=8, num_experts=4, num_experts_per_tok=2)
    config._experts_implementation = "grouped_mm"
    torch.manual_seed(0)
    block = Qwen3MoeSparseMoeBlock(config)
    for p in block.parameters():  # made with torch.empty: the model's _init_weights fills them
        nn.init.normal_(p, std=0.3)
    assert_like_torch(block, lambda b: [randn(b, 5, 16, seed=b)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fn, inputs", [
    (lambda x, s: x.index_add(0, torch.tensor([1, 0, 1, 3, 1]), s),  # repeated rows add up
     lambda b: [randn(4, b), randn(5, b, seed=1)]),
    (lambda x, s: x.index_add(1, torch.tensor([2, 2, 0]), s, alpha=-1.5),  # a middle dim, alpha
     lambda b: [randn(b, 4, 2), randn(b, 3, 2, seed=1)]),
    (lambda x, s: x.index_add(-1, torch.tensor([0, 3, 0, 0]), s * 2),  # the last dim
     lambda b: [randn(b, 2, 4), randn(b, 2, 4, seed=1)]),
    (lambda x, s: x.index_add(0, torch.tensor([0, 2, 0]), s),  # along the symbolic batch
     lambda b: [randn(b, 3), randn(3, 3, seed=1)]),
    (lambda x, s: x.index_add(0, torch.tensor([0]), s),  # 0-d
     lambda b: [randn(()), randn((), seed=1)]),
], ids=["rows", "middle-dim-alpha", "last-dim", "batch-dim", "scalar"])
def test_index_add(fn, inputs):
    assert_like_torch(Lambda(fn), inputs)


def test_index_add_at_positions_computed_from_the_data():
    """JetMoE puts each (token, expert) output back on its token: index_add at the token of each
    entry of a sort, every token reached top_k times."""
    def unsort(x):
        order = x[:, :2].flatten().sort(0)[1]  # (2b,) the entries sorted by their value
        return torch.zeros_like(x).index_add(0, order // 2, x.repeat_interleave(2, 0)[order] * 3)

    assert_like_torch(Lambda(unsort), lambda b: [randn(b, 4)])


class ExpertsBySplit(nn.Module):
    """JetMoE's ParallelExperts: rows sorted by expert, split by the experts' counts read with
    .tolist() (an unbacked size each), one Linear per expert, concatenated."""

    def __init__(self, experts=3):
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(5, 4) for _ in range(experts))

    def forward(self, x, expert):
        counts = (expert[:, None] == torch.arange(len(self.experts))).sum(0).tolist()
        rows = x[expert.sort(0)[1]].split(counts, dim=0)
        return torch.cat([linear(r) for linear, r in zip(self.experts, rows)]) * 2


def test_split_by_counts_read_with_item():
    """Each expert's rows, sized when the step runs; expert 1 gets none at one batch size."""
    def inputs(b):
        expert = torch.tensor([0, 2, 1, 2, 0, 2, 1][:b]) if b == 7 else torch.tensor([2, 0, 0, 2, 2][:b])
        return [randn(b, 5, seed=b), expert]

    assert_like_torch(ExpertsBySplit(), inputs, batches=(5, 7))


def test_moe_layer_of_jetmoe():
    """JetMoE's MoE block as transformers runs it: router topk, scatter, counts read with .tolist(),
    sort, a split by the counts, per-expert linears and index_add back onto the tokens."""
    pytest.importorskip("transformers")
    from transformers import JetMoeConfig
    from transformers.models.jetmoe.modeling_jetmoe import JetMoeMoE

    config = JetMoeConfig(hidden_size=16, intermediate_size=8, num_local_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    block = JetMoeMoE(config)
    for p in block.parameters():  # made with torch.empty: the model's _init_weights fills them
        nn.init.normal_(p, std=0.3)
    assert_like_torch(block, lambda b: [randn(b, 5, 16, seed=b)], rtol=1e-4, atol=1e-5)


class TorchGroupedMM(nn.Module):
    """torch._grouped_mm(x (S, I), w (E, I, O), offs): what transformers' grouped_mm experts call
    for bf16 experts; rows offs[e-1] <= s < offs[e] use w[e] (the last offset is S here: torch
    leaves rows past it unwritten)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 8, 8) * 0.3)

    def forward(self, x, offs):
        return torch._grouped_mm(x, self.w.to(x.dtype), offs=offs) * 2


def test_torch_grouped_mm_of_bf16_experts_trains_as_eager():
    """bf16 only: torch.export's fake kernel of _grouped_mm refuses f32. Expert 1 gets no rows."""
    torch.manual_seed(0)
    eager = TorchGroupedMM().bfloat16()
    ours = trainrt.RTModule(copy.deepcopy(eager))
    x = randn(6, 8).bfloat16()
    offs = torch.tensor([2, 2, 6], dtype=torch.int32)
    expected, got = eager(x, offs), ours(x, offs)
    assert ours.fallback_reason is None
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)
    expected.square().sum().backward()
    got.square().sum().backward()
    torch.testing.assert_close(ours.w.grad, eager.w.grad, rtol=2e-2, atol=2e-2 * eager.w.grad.abs().max().item())
