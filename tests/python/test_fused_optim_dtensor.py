"""trainrt.optim on DTensor parameters (FSDP2's shards): FusedAdam and FusedSGD step each local shard in
place, as torch's optimizers step the DTensors, and keep DTensor state (what DCP saves); FusedLamb,
whose norms are of whole tensors, refuses shards. On a 1-rank mesh of an in-process gloo group (the
2-rank runs are tests/python/test_fsdp.py)."""

import pytest
import torch

import trainrt

dist = pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch without distributed")


@pytest.fixture
def mesh():
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def _sharded(mesh, shapes=((7, 3), (5,), (0, 2)), seed=0):
    from torch.distributed.tensor import Shard, distribute_tensor

    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(distribute_tensor(torch.randn(s, generator=g), mesh, [Shard(0)])) for s in shapes]


def _fill_grads(params, step):
    from torch.distributed.tensor import distribute_tensor

    g = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = distribute_tensor(torch.randn(p.shape, generator=g), p.device_mesh, p.placements)


@pytest.mark.parametrize("ours, theirs", [
    (lambda ps: trainrt.optim.FusedAdam(ps, lr=1e-2, weight_decay=0.1),
     lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1)),
    (lambda ps: trainrt.optim.FusedSGD(ps, lr=0.1, momentum=0.9),
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))])
def test_steps_shards_as_torch_steps_dtensors(mesh, ours, theirs):
    from torch.distributed.tensor import DTensor

    mine, reference = _sharded(mesh), _sharded(mesh)
    opt, ref = ours(mine), theirs(reference)
    for step in range(3):
        _fill_grads(mine, step)
        _fill_grads(reference, step)
        opt.step()
        ref.step()
    for p, r in zip(mine, reference):
        assert isinstance(p, DTensor)
        torch.testing.assert_close(p.full_tensor(), r.full_tensor(), rtol=1e-5, atol=1e-7)
    for p in mine:  # as torch keeps it: a DTensor like the parameter ("step" a plain 0-d tensor)
        for key, value in opt.state[p].items():
            if key != "step":
                assert isinstance(value, DTensor) and value.placements == p.placements, key
    ref.load_state_dict(opt.state_dict())  # and loads into torch's optimizer


def test_fused_lamb_refuses_shards(mesh):
    params = _sharded(mesh)
    _fill_grads(params, 0)
    before = [p.full_tensor().clone() for p in params]
    with pytest.raises(TypeError, match="DTensor shard"):
        trainrt.optim.FusedLamb(params).step()
    for p, b in zip(params, before):
        assert torch.equal(p.full_tensor(), b)
