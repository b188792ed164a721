"""FSDP2 (fully_shard) with RTModule on 2 ranks (gloo) against one eager process on the same global
batches: parameters within 1e-4 relative after each run, on a GPT-style model whose blocks are
sharded and whose token embedding is tied to the LM head (both in the root's group). Both orders:
blocks and root sharded, then RTModule around the model (one engine graph; FSDP's hooks run by
RTModule, trainrt/fsdp.py), and RTModule around each block, then sharded (FSDP's hooks around each
RTModule). With torch's AdamW and FusedAdam (stepping DTensor shards), gradient accumulation with
and without set_requires_gradient_sync(False), a DCP save and resume that gives the uninterrupted
run's losses, the engine's bf16 under FSDP, and the refusals: MixedPrecisionPolicy(param_dtype=bf16),
FusedLamb on shards, a second forward of a sharded RTModule before its backward."""

import sys

import pytest
import torch

from trainrt.testing import run_on_ranks

pytestmark = [pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without distributed"),
              pytest.mark.slow]  # two spawned ranks: ~10 s a case

STEPS, PER_RANK = 3, 2
VOCAB, SEQ = 64, 8


def _gpt():
    """trainrt.bench's GPT (pre-LayerNorm blocks, LM head tied to the token embedding), 2 blocks of 32.
    Without the qkv bias: softmax ignores a shift along the keys, so the key bias's gradient is exactly
    zero and AdamW moves it by rounding noise, which no two runs share (tests/python/parity.py)."""
    from trainrt.bench.models import GPT

    torch.manual_seed(0)
    model = GPT(vocab=VOCAB, dim=32, heads=2, seq=SEQ, layers=2)
    for block in model.blocks:
        block.qkv.bias = None
    return model


def _batches(steps=STEPS):
    g = torch.Generator().manual_seed(7)
    data = [torch.randint(0, VOCAB, (2 * PER_RANK, SEQ + 1), generator=g) for _ in range(steps)]
    return [(d[:, :-1].contiguous(), d[:, 1:].contiguous()) for d in data]


def _optimizer(kind, params):
    import trainrt

    if kind == "fused_adam":
        return trainrt.optim.FusedAdam(params, lr=1e-2, weight_decay=0.01)
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)


def _eager_reference(kind="adamw", steps=STEPS, autocast=False):
    """One process on the whole global batches: FSDP averages the ranks' gradients, the mean over both halves."""
    model = _gpt()
    opt = _optimizer(kind, model.parameters())
    losses = []
    for ids, targets in _batches(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(ids, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return {name: p.detach().clone() for name, p in model.named_parameters()}, losses


def _shard(order, model, mixed_precision=None):
    """The model as trained, and the RTModules in it, with fully_shard applied in `order`."""
    import trainrt
    from torch.distributed.fsdp import fully_shard

    if order == "shard_then_wrap":
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        wrapped = trainrt.RTModule(model, mixed_precision=mixed_precision)
        return wrapped, [wrapped]
    for i, block in enumerate(model.blocks):
        model.blocks[i] = trainrt.RTModule(block, mixed_precision=mixed_precision)
        fully_shard(model.blocks[i])
    fully_shard(model)
    return model, list(model.blocks)


def _mine(rank, tensors):
    return tuple(t[rank * PER_RANK:(rank + 1) * PER_RANK] for t in tensors)


def _global_mean(loss):
    loss = loss.detach().clone()
    torch.distributed.all_reduce(loss)
    return loss.item() / torch.distributed.get_world_size()


def _full_parameters(model):
    return {name: p.full_tensor().detach().clone() for name, p in model.named_parameters()}


def _train_rank(rank, world_size, order, kind, accumulate=1, no_sync=False, mixed_precision=None):
    from torch.distributed.tensor import DTensor

    inner = _gpt()
    model, rtmodules = _shard(order, inner, mixed_precision)
    opt = _optimizer(kind, model.parameters())
    losses = []
    for batch in _batches():
        ids, targets = _mine(rank, batch)
        loss = 0.0
        for micro in range(accumulate):
            rows = slice(micro * PER_RANK // accumulate, (micro + 1) * PER_RANK // accumulate)
            if no_sync:  # FSDP2's accumulation without communication: reduce-scatter at the last micro-batch only
                inner.set_requires_gradient_sync(micro == accumulate - 1)
            micro_loss = model(ids[rows], targets[rows]) / accumulate
            micro_loss.backward()
            loss += _global_mean(micro_loss)
            assert all(m.fallback_reason is None for m in rtmodules), [m.fallback_reason for m in rtmodules]
        # As with plain FSDP2: sharded gradients, and the parameters resharded after the backward.
        for name, p in inner.named_parameters():
            assert isinstance(p, DTensor) and isinstance(p.grad, DTensor), name
            assert p.grad.to_local().shape == p.to_local().shape, name
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss)
    assert inner.head.weight is inner.wte.weight  # still tied
    return _full_parameters(inner), losses


def _assert_matches(result, expected):
    """Losses within 1e-4 relative; each parameter within 1e-4 of its largest magnitude (parity.py's
    measure for attention models: AdamW moves an element whose gradient is near zero by about lr
    whatever its sign, and the engine's attention rounds differently from eager's)."""
    params, losses = result
    expected_params, expected_losses = expected
    assert losses == pytest.approx(expected_losses, rel=1e-4)
    assert set(params) == set(expected_params)
    for name, p in params.items():
        e = expected_params[name]
        err, scale = (p - e).abs().max().item(), e.abs().max().item()
        assert err <= 1e-4 * scale + 1e-6, f"{name}: max |diff| {err:.3g} vs max |param| {scale:.3g}"


@pytest.mark.parametrize("order, kind", [("shard_then_wrap", "adamw"), ("shard_then_wrap", "fused_adam"),
                                         ("wrap_then_shard", "adamw"), ("wrap_then_shard", "fused_adam")])
def test_fsdp_with_rtmodule_matches_one_eager_process(order, kind):
    expected = _eager_reference(kind)
    for result in run_on_ranks(_train_rank, order, kind):
        _assert_matches(result, expected)


@pytest.mark.parametrize("order, no_sync", [("shard_then_wrap", False), ("shard_then_wrap", True),
                                            ("wrap_then_shard", True)])
def test_gradient_accumulation_matches_one_eager_process(order, no_sync):
    expected = _eager_reference()
    for result in run_on_ranks(_train_rank, order, "adamw", 2, no_sync):
        _assert_matches(result, expected)


def test_the_engines_bf16_under_fsdp_matches_eager_autocast():
    """The mixed precision FSDP's param_dtype is refused for: f32 all-gathers, RTModule(mixed_precision=
    "bf16"), which computes as torch.autocast does (the wrap-then-shard eager part stays f32, so only
    shard-then-wrap matches autocast over the whole model). Losses only: with bf16 matmuls AdamW moves
    elements whose gradients round differently by about lr either way."""
    _, expected_losses = _eager_reference(autocast=True)
    for _, losses in run_on_ranks(_train_rank, "shard_then_wrap", "adamw", 1, False, "bf16"):
        assert losses == pytest.approx(expected_losses, rel=1e-3)


def _in_engine_backward() -> bool:
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "backward" and "rtmodule" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _reduce_scatters_rank(rank, world_size):
    import torch.distributed as dist

    inside = []
    reduce_scatter = dist.reduce_scatter_single  # what FSDP2's default reduce-scatter calls

    def record(*args, **kwargs):
        inside.append(_in_engine_backward())
        return reduce_scatter(*args, **kwargs)

    dist.reduce_scatter_single = record
    inner = _gpt()
    model, _ = _shard("shard_then_wrap", inner)
    batch = _mine(rank, _batches(1)[0])
    model(*batch).backward()
    with torch.no_grad():
        model(*batch)
    return inside, {type(p).__name__ for p in inner.parameters()}


def test_blocks_are_reduce_scattered_inside_the_engine_backward():
    """Shard-then-wrap: each block's gradients are reduce-scattered as soon as the engine has handed
    over the last of them, while its backward goes on; the root's (embedding, head, final norm) at
    the end, by FSDP's final callback. A no-grad forward reshards everything after it."""
    (inside, kinds), _ = run_on_ranks(_reduce_scatters_rank)
    assert inside == [True, True, False], inside
    assert kinds == {"DTensor"}


def _resume_rank(rank, world_size, order, path):
    """Two steps, a DCP save, then a fresh model and optimizer (other initial values) load it and
    take the last steps."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    batches, losses = _batches(4), []

    def train(model, inner, opt, steps):
        for batch in steps:
            loss = model(*_mine(rank, batch))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(_global_mean(loss))

    inner = _gpt()
    model, _ = _shard(order, inner)
    opt = _optimizer("fused_adam", model.parameters())
    train(model, inner, opt, batches[:2])
    model_state, opt_state = get_state_dict(model, opt)
    dcp.save({"model": model_state, "optimizer": opt_state}, checkpoint_id=path)

    torch.manual_seed(1)
    fresh = _gpt()
    with torch.no_grad():
        for p in fresh.parameters():
            p.normal_()
    model, rtmodules = _shard(order, fresh)
    opt = _optimizer("fused_adam", model.parameters())
    model_state, opt_state = get_state_dict(model, opt)
    state = {"model": model_state, "optimizer": opt_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    train(model, fresh, opt, batches[2:])
    assert all(m.fallback_reason is None for m in rtmodules)
    return _full_parameters(fresh), losses


@pytest.mark.parametrize("order", ["shard_then_wrap", "wrap_then_shard"])
def test_dcp_save_and_resume_gives_the_uninterrupted_losses(order, tmp_path):
    expected = _eager_reference("fused_adam", steps=4)
    for result in run_on_ranks(_resume_rank, order, str(tmp_path / "checkpoint")):
        _assert_matches(result, expected)


def _refusals_rank(rank, world_size, order):
    """What each refusal says (FALLBACK_DISABLE makes a refused engine call raise)."""
    import trainrt
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    said = {}
    ids, targets = _mine(rank, _batches(1)[0])
    model = _gpt()
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    with pytest.raises(RuntimeError) as bf16:
        trainrt.RTModule(model)(ids, targets)
    said["bf16"] = str(bf16.value)

    model, _ = _shard(order, _gpt())
    with pytest.raises(TypeError) as lamb:
        model(ids, targets).backward()
        trainrt.optim.FusedLamb(model.parameters()).step()
    said["lamb"] = str(lamb.value)
    return said


def test_refusals_say_why():
    said, _ = run_on_ranks(_refusals_rank, "shard_then_wrap")
    assert "MixedPrecisionPolicy(param_dtype=torch.bfloat16)" in said["bf16"], said["bf16"]
    assert "mixed_precision='bf16'" in said["bf16"], said["bf16"]
    assert "DTensor shard (FSDP2)" in said["lamb"], said["lamb"]


def _two_forwards_rank(rank, world_size, order):
    """Two micro-batches' forwards, then one backward of their sum."""
    model, rtmodules = _shard(order, _gpt())
    opt = _optimizer("adamw", model.parameters())
    losses = []
    for batch in _batches():
        ids, targets = _mine(rank, batch)
        first, second = (model(ids[rows], targets[rows]) / 2 for rows in (slice(0, 1), slice(1, 2)))
        try:
            (first + second).backward()
        except RuntimeError as err:
            return str(err)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(_global_mean(first + second))
    assert all(m.fallback_reason is None for m in rtmodules)
    return _full_parameters(model), losses


def test_two_forwards_before_a_backward():
    """Shard-then-wrap leaves every reduce-scatter to FSDP's final callback when a forward comes
    before the last one's backward, and matches eager. Wrap-then-shard cannot: FSDP's post-backward
    of the second call reshards the block before the first call's engine backward reads its
    parameters, which then raises instead of reading freed memory."""
    expected = _eager_reference()
    for result in run_on_ranks(_two_forwards_rank, "shard_then_wrap"):
        _assert_matches(result, expected)
    said, _ = run_on_ranks(_two_forwards_rank, "wrap_then_shard")
    assert "memory was freed or moved since the forward" in said, said
