"""DistributedDataParallel(RTModule(model)) on 2 ranks (gloo) against one eager process on the same
global batches: parameters within 1e-4 relative, step after step, with torch's AdamW, with FusedAdam
and with gradient accumulation under no_sync; and the all-reduce overlapping the engine's backward,
since gradients leave the engine as they become final (trainrt/gradient_handoff.py)."""

import sys

import pytest
import torch

import trainrt
from trainrt.testing import run_on_ranks

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without distributed")

STEPS, PER_RANK = 3, 4


class TiedLM(torch.nn.Module):
    """Embedding tied to the output projection, a LayerNorm and an MLP: (B, T) ids -> loss."""

    def __init__(self, vocab=64, width=32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.norm = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids, labels):
        h = self.embed(ids)
        h = h + self.mlp(self.norm(h))
        return torch.nn.functional.cross_entropy(self.head(h).flatten(0, 1), labels.flatten())


def _batches():
    g = torch.Generator().manual_seed(7)
    return [(torch.randint(0, 64, (2 * PER_RANK, 8), generator=g), torch.randint(0, 64, (2 * PER_RANK, 8), generator=g))
            for _ in range(STEPS)]


def _optimizer(kind, params):
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)
    if kind == "fused_adam":
        return trainrt.optim.FusedAdam(params, lr=1e-2, weight_decay=0.01)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def _eager_reference(kind, accumulate):
    torch.manual_seed(0)
    model = TiedLM()
    opt = _optimizer(kind, model.parameters())
    losses = []
    for ids, labels in _batches():
        # DDP averages the ranks' gradients: the mean over both halves of the global batch.
        for micro in range(accumulate):
            rows = slice(micro * 2 * PER_RANK // accumulate, (micro + 1) * 2 * PER_RANK // accumulate)
            loss = model(ids[rows], labels[rows]) / accumulate
            loss.backward()
            losses.append(loss.item())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def _in_engine_backward() -> bool:
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "backward" and "rtmodule" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _ddp_rank(rank, world_size, kind, accumulate, find_unused=False):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    import trainrt.gradient_handoff

    trainrt.gradient_handoff.GROUP_BYTES = 0  # each gradient on its own: several buckets in this small model
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(trainrt.RTModule(TiedLM()), bucket_cap_mb=0.01,
                                                      find_unused_parameters=find_unused)
    inside = []

    def record(state, bucket):
        inside.append(_in_engine_backward())
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, record)
    opt = _optimizer(kind, model.parameters())
    for ids, labels in _batches():
        mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
        ids, labels = ids[mine], labels[mine]
        for micro in range(accumulate):
            rows = slice(micro * PER_RANK // accumulate, (micro + 1) * PER_RANK // accumulate)
            sync = model.no_sync() if micro < accumulate - 1 else torch.enable_grad()
            with sync:
                (model(ids[rows], labels[rows]) / accumulate).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert model.module.fallback_reason is None
    return [p.detach().clone() for p in model.module.parameters()], inside


@pytest.mark.slow
@pytest.mark.parametrize("kind, accumulate, find_unused", [("adamw", 1, False), ("fused_adam", 1, False),
                                                           ("sgd", 2, False), ("adamw", 1, True)])
def test_ddp_of_rtmodule_matches_one_eager_process(kind, accumulate, find_unused):
    """find_unused_parameters=True (gradients then come at the end of the engine's backward:
    gradient_handoff.py says why) trains the same."""
    expected = _eager_reference(kind, accumulate)
    results = run_on_ranks(_ddp_rank, kind, accumulate, find_unused)
    for params, _ in results:
        for p, e in zip(params, expected):
            torch.testing.assert_close(p, e, rtol=1e-4, atol=1e-6)
    for a, b in zip(results[0][0], results[1][0]):
        assert torch.equal(a, b)  # DDP keeps the replicas identical


@pytest.mark.slow
def test_ddp_all_reduce_starts_inside_the_engine_backward():
    """With several buckets, DDP's reducer launches the first all-reduces while the engine's backward
    is still running: the comm hook fires from inside RTModule's backward."""
    (_, inside), _ = run_on_ranks(_ddp_rank, "sgd", 1)
    assert any(inside) and len(inside) > 1, inside


def _step_in_backward_refusal(rank, world_size):
    model = trainrt.RTModule(TiedLM())
    try:
        trainrt.optim.FusedAdam(model.parameters(), lr=1e-2, step_in_backward=True)
    except ValueError as err:
        return str(err)
    return None


@pytest.mark.slow
def test_step_in_backward_is_refused_under_ddp_naming_the_alternative():
    """It would step each parameter before its gradient's all-reduce; the message says what to use."""
    for message in run_on_ranks(_step_in_backward_refusal):
        assert message is not None and "world size above 1" in message
        assert "without it" in message and "overlaps the backward" in message
