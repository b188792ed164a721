"""What a fused optimizer step hands the engine for one parameter group (FusedAdam, FusedSGD, FusedLamb).

The engine's kernels run in place on zero-copy views of the torch tensors, so everything the views
cannot express is refused here, before any tensor changes, with the group, index, shape and dtype of
the parameter in the message: a sparse gradient, a tensor off the CPU, a dtype other than float32,
float16 and bfloat16 (the engine computes in f32 and stores 16-bit values rounded to nearest even;
float64 is refused rather than silently computed in f32), a non-contiguous parameter.

A DTensor (FSDP2's sharded parameters, their gradients and, from torch's optimizers or a checkpoint,
their state) crosses as its local shard (`DTensor.to_local()`, a view): the step is elementwise, so
each rank steps its shard in place. State the engine creates for a DTensor parameter is stored as a
DTensor of the parameter's mesh and placements, as torch.optim keeps it (what DCP saves and loads).

    class FusedAdam(FusedOptimizer):
        def _step_group(self, group, checked, grad_scale):          # checked: a CheckedGroup
            step_with_state(self.state, group, checked.indices, ("exp_avg", "exp_avg_sq"),
                            lambda steps, exp_avgs, exp_avg_sqs: _C.adam_step(
                                checked.names, checked.params, checked.grads, steps, exp_avgs, ...))

The tensors cross as DLPack capsules (torch.utils.dlpack.to_dlpack): the engine reads those in well
under a microsecond, where handing it the tensor objects costs ~2 us each through Tensor.__dlpack__
(about 1.2 ms of a step over GPT-2's 148 parameters and their state).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import torch
from torch.utils.dlpack import to_dlpack

from trainrt.engine_arrays import from_engine
from trainrt.optim import step_in_backward as in_backward

try:
    from torch.distributed.tensor import DTensor
except ImportError:  # torch without distributed
    DTensor = ()  # isinstance(t, ()) is False

# Parameter dtypes the engine's optimizer kernels run (math in f32, state in the parameter's dtype).
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def local(t: torch.Tensor) -> torch.Tensor:
    """t itself, or a DTensor's local shard (a view the engine reads and writes in place)."""
    return t.to_local() if isinstance(t, DTensor) else t


def like(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """State t of parameter p as torch.optim keeps it: a DTensor shard like p where p is one."""
    if not isinstance(p, DTensor):
        return t
    return DTensor.from_local(t, p.device_mesh, p.placements, run_check=False, shape=p.shape, stride=p.stride())


def describe(group_index: int, index: int, p: torch.Tensor) -> str:
    return f"parameter {index} of param_groups[{group_index}] ({p.dtype}, shape {tuple(p.shape)})"


class CheckedGroup(NamedTuple):
    """A group's parameters that have a gradient, as the engine takes them."""

    names: list[str]   # for the engine's error messages
    params: list       # DLPack views of the parameters (same storage)
    grads: list        # DLPack views of the gradients
    indices: list[int]  # each one's index in group["params"]


def params_with_grads(optimizer: str, group_index: int, group: dict, only: int | None = None) -> CheckedGroup:
    """The group's parameters that have a gradient (or group["params"][only] alone, if it has one),
    checked, as engine-ready tensors."""
    names, params, grads, indices = [], [], [], []
    strided = torch.strided
    for i, p in enumerate(group["params"]):
        g = p.grad
        if g is None or (only is not None and i != only):
            continue
        p, g = local(p), local(g)
        # One cheap test for the common case; the detailed one only to word the error.
        if not (p.dtype in SUPPORTED_DTYPES and g.dtype is p.dtype and g.layout is strided and p.is_cpu
                and g.is_cpu and p.is_contiguous()):
            _refuse(optimizer, group_index, i, p, g)
        names.append(f"param_groups[{group_index}][{i}]")
        # to_dlpack takes a tensor that requires grad as it is: p.detach() would only add a tensor
        # object of the same storage (~0.3 us, 90 us a step over GPT-2's 148 parameters and grads).
        # The engine's in-place writes bypass autograd's version counter either way.
        params.append(to_dlpack(p))
        # A gradient is only read: a rare non-contiguous one is copied rather than refused.
        grads.append(to_dlpack(g.contiguous()))
        indices.append(i)
    return CheckedGroup(names, params, grads, indices)


def _refuse(optimizer: str, group_index: int, i: int, p: torch.Tensor, g: torch.Tensor):
    if g.layout is not torch.strided:
        raise RuntimeError(f"{optimizer} does not support sparse gradients: {describe(group_index, i, p)} "
                           f"has a {g.layout} gradient")
    if not (p.is_cpu and g.is_cpu):
        raise ValueError(f"{optimizer} runs on the CPU: {describe(group_index, i, p)} is on {p.device} "
                         f"(gradient on {g.device})")
    if p.dtype not in SUPPORTED_DTYPES or g.dtype != p.dtype:
        raise TypeError(f"{optimizer} supports float32, float16 and bfloat16 parameters with gradients of "
                        f"the same dtype: {describe(group_index, i, p)} has a {g.dtype} gradient")
    raise ValueError(f"{optimizer} updates parameters in place and needs them contiguous: "
                     f"{describe(group_index, i, p)} has strides {p.stride()}")


def view(t: torch.Tensor):
    """A zero-copy view of t (of its local shard, for a DTensor) for the engine (a DLPack capsule)."""
    return to_dlpack(local(t))


def state_view(state: dict, key: str):
    """A view of state[key] the engine updates in place (a loaded non-contiguous buffer is replaced
    by a contiguous copy once), or None when the step has to create the buffer."""
    buf = state.get(key)
    if buf is None:
        return None
    if not local(buf).is_contiguous():
        buf = state[key] = buf.contiguous()
    return view(buf)


def scalar_dtype() -> torch.dtype:
    """torch.optim's dtype for state["step"]: float32 unless the default dtype is float64."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def step_with_state(optimizer_state: dict, group: dict, indices: Sequence[int], keys: Sequence[str],
                    engine_step: Callable) -> None:
    """Runs engine_step(steps, *buffers) over the state of the parameters group["params"][i], i in indices.

    A parameter's first step gives it state["step"] = 0 (a 0-d tensor, as torch.optim keeps it), which
    the engine increments in place. steps are views of state["step"]; buffers one list per key, of
    views of state[key] or None where the engine is to create it. engine_step returns the created
    arrays per key (None where it used the given view), which are stored in the state.
    """
    states = [optimizer_state[group["params"][i]] for i in indices]
    for s in states:
        if "step" not in s:
            s["step"] = torch.tensor(0.0, dtype=scalar_dtype())
    created = engine_step([view(s["step"]) for s in states], *([state_view(s, k) for s in states] for k in keys))
    params = [group["params"][i] for i in indices]
    for key, arrays in zip(keys, created):
        adopt(arrays, states, key, params)


def adopt(created, states: list[dict], key: str, params: list[torch.Tensor]) -> None:
    """Stores the buffers the engine created (DLPack capsules of engine memory) as torch tensors, in
    the states of `params` (DTensors for DTensor parameters)."""
    for capsule, state, p in zip(created, states, params):
        if capsule is not None:
            state[key] = like(p, from_engine(capsule))


class FusedOptimizer(torch.optim.Optimizer):
    """What FusedAdam, FusedSGD and FusedLamb share: step() checks every group, then runs one engine
    call per group (_step_group). With step_in_backward (FusedAdam, FusedSGD: see step_in_backward.py)
    each parameter is stepped during the backward instead, one at a time, by the same _step_group or
    by the engine's OptimizerInBackward (_add_to_consumer); step() then finds no gradient to use."""

    # FP16_Optimizer hands the loss-scale / clip factor to step(grad_scale=...) rather than
    # rescaling the gradients in a pass of its own.
    _accepts_grad_scale = True

    def __init__(self, params, defaults: dict, step_in_backward: bool = False):
        if step_in_backward and torch.distributed.is_available() and torch.distributed.is_initialized() \
                and torch.distributed.get_world_size() > 1:
            raise ValueError(f"{type(self).__name__}(step_in_backward=True) steps each parameter before any "
                             "gradient all-reduce (DDP, DeepSpeed) could run: not with a world size above 1. Use "
                             f"{type(self).__name__}(...) without it: under torch.distributed each gradient already "
                             "leaves the engine as soon as it is final, so the all-reduce overlaps the backward "
                             "(TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT)")
        self.step_in_backward = step_in_backward
        self._where = None     # id(param) -> (group index, index in the group), built on use
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        self._where = None
        if self.step_in_backward:
            in_backward.register(self, self.param_groups[-1]["params"])

    def _locate(self, p: torch.Tensor) -> tuple[int, int]:
        """(group index, index in group["params"]) of parameter p."""
        if self._where is None:
            self._where = {id(q): (g, i) for g, group in enumerate(self.param_groups)
                           for i, q in enumerate(group["params"])}
        return self._where[id(p)]

    def _step_one(self, p: torch.Tensor) -> None:
        """One step of p alone, with its group's options and p.grad (the torch hook's path)."""
        g, i = self._locate(p)
        group = self.param_groups[g]
        self._step_group(group, params_with_grads(type(self).__name__, g, group, only=i), 1.0)

    @staticmethod
    def _engine_can_step(p: torch.Tensor) -> bool:
        """Whether the engine's backward can step p in place (the memory it reads is p's)."""
        return p.dtype is torch.float32 and p.is_cpu and p.layout is torch.strided and p.is_contiguous()

    def _after_engine_step(self, consumer, index: int, p: torch.Tensor) -> None:
        """Adopts what the engine's step of p created (nothing, unless overridden)."""

    @torch.no_grad()
    def step(self, closure=None, *, grad_scale: float = 1.0):
        """One step over every parameter that has a gradient: one engine call per group.

        grad_scale multiplies every gradient as the step reads it (they are left unchanged): what
        FP16_Optimizer passes to unscale and clip within the step. Every group is checked before any
        is stepped, so a refused parameter leaves all of them unchanged.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        name = type(self).__name__
        groups = [(group, params_with_grads(name, i, group)) for i, group in enumerate(self.param_groups)]
        grad_scale = self._global_grad_scale(groups, grad_scale)
        for group, checked in groups:
            if checked.params:
                self._step_group(group, checked, grad_scale)
        return loss

    def _global_grad_scale(self, groups: list[tuple[dict, CheckedGroup]], grad_scale: float) -> float:
        """The grad_scale every group steps with; FusedLamb folds its global gradient clip in here."""
        return grad_scale

    def _step_group(self, group: dict, checked: CheckedGroup, grad_scale: float) -> None:
        raise NotImplementedError
