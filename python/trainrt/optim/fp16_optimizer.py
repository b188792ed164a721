"""`trainrt.optim.FP16_Optimizer`: loss scaling, overflow skipping and gradient clipping around any optimizer.

    optimizer = trainrt.optim.FP16_Optimizer(trainrt.optim.FusedAdam(model.parameters()), max_grad_norm=1.0)
    optimizer.backward(loss)        # = optimizer.scale_loss(loss).backward()
    optimizer.step()                # skipped (and the scale backed off) when a gradient is inf / NaN
    optimizer.zero_grad()

The dynamic loss scale follows torch.amp.GradScaler's update rule (init_scale / growth_factor /
backoff_factor / growth_interval, the scale kept in float32 as GradScaler keeps it), plus hysteresis
as DeepSpeed and Megatron have it: the scale backs off only after `hysteresis` consecutive overflowing
steps (every overflowing step is still skipped, and resets the growth count); a clean step restores it.

step() reads all gradients once in the engine (_C.unscale_and_norm: the global L2 norm of the
unscaled gradients, summed in double, and the inf / NaN check in the same pass). A clean step then
applies the factor inv_scale * clip (clip as torch.nn.utils.clip_grad_norm_ computes it when
max_grad_norm > 0): a trainrt FusedAdam / FusedSGD takes it as its grad_scale within its own pass
(the gradients stay scaled), any other optimizer gets the gradients rescaled in place by one more
engine pass (_C.scale_grads), as GradScaler.unscale_ + clip_grad_norm_ would leave them.

Given a DeepSpeed ZeRO stage 1, 2 or 3 optimizer (what `deepspeed.initialize` returns), FP16_Optimizer
returns that optimizer itself with its L2 gradient norm (and, in stage 1 / 2, its overflow check)
replaced by the engine's pass, as ORTModule's FP16_Optimizer did; DeepSpeed keeps scaling, clipping
and stepping, and the loop stays engine.backward(loss) / engine.step() (deepspeed_zero.py).

Gradients must be float32 on the CPU (the engine's kernels are f32-only): keep f32 master parameters
and run 16-bit compute under autocast. An LR scheduler takes the wrapped optimizer
(`FP16_Optimizer.optimizer`), as torch's schedulers require a torch.optim.Optimizer.
"""

from __future__ import annotations

import math
import struct

import torch
from torch.utils.dlpack import to_dlpack

from trainrt import _C
from trainrt.optim import deepspeed_zero

_F32_MAX = 3.4028234663852886e38


def _f32(x: float) -> float:
    """x rounded to float32 (inf beyond its range), as GradScaler's float32 scale tensor holds it."""
    if math.isnan(x):
        return x
    if abs(x) > _F32_MAX:
        return math.copysign(math.inf, x)
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:  # rounds past the largest float
        return math.copysign(math.inf, x)


class FP16_Optimizer:  # noqa: N801 (the name Apex, DeepSpeed and ORT users know)
    """Wraps a trainrt or torch optimizer with loss scaling, inf/NaN step skipping and global-norm clipping.

    static_loss_scale: a fixed scale (dynamic scaling off). dynamic_loss_scale=False without a
    static scale uses scale 1. Overflowing steps are skipped in every mode. max_grad_norm > 0 clips
    the unscaled gradients to that global L2 norm (torch.nn.utils.clip_grad_norm_ semantics).

    Example:

        >>> optimizer = trainrt.optim.FP16_Optimizer(trainrt.optim.FusedAdam(model.parameters()), max_grad_norm=1.0)
        >>> optimizer.backward(loss)      # loss * scale, then backward
        >>> optimizer.step()              # unscaled and clipped in one pass; skipped on inf / NaN
        >>> optimizer.zero_grad()

        >>> engine, optimizer, _, _ = deepspeed.initialize(model=trainrt.RTModule(model), optimizer=adamw, config=config)
        >>> optimizer = trainrt.optim.FP16_Optimizer(optimizer)   # the ZeRO optimizer, with the engine's checks
    """

    def __new__(cls, optimizer, *args, **kwargs):
        if deepspeed_zero.is_deepspeed_optimizer(optimizer):  # scales the loss itself: not wrapped again
            if args or kwargs:
                raise TypeError("FP16_Optimizer of a DeepSpeed optimizer takes no options: its loss scaling and "
                                "clipping are set in the DeepSpeed config (fp16 / bf16, gradient_clipping)")
            return deepspeed_zero.use_engine_checks(optimizer)
        return super().__new__(cls)

    def __init__(self, optimizer, static_loss_scale: float | None = None, dynamic_loss_scale: bool = True,
                 initial_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, hysteresis: int = 1, max_grad_norm: float = 0.0):
        if not hasattr(optimizer, "param_groups") or not callable(getattr(optimizer, "step", None)):
            raise TypeError(f"FP16_Optimizer wraps an optimizer (param_groups and step()), got {type(optimizer).__name__}")
        if isinstance(optimizer, FP16_Optimizer):
            raise TypeError("FP16_Optimizer: the optimizer is already wrapped")
        if getattr(optimizer, "step_in_backward", False):
            raise ValueError(f"FP16_Optimizer cannot wrap a {type(optimizer).__name__} with step_in_backward=True: "
                             "that optimizer steps during the backward, before the gradients can be unscaled, "
                             "checked for inf / NaN or clipped")
        if static_loss_scale is not None and not static_loss_scale > 0:
            raise ValueError(f"static_loss_scale must be positive, got {static_loss_scale}")
        if not initial_scale > 0:
            raise ValueError(f"initial_scale must be positive, got {initial_scale}")
        if not growth_factor > 1.0:
            raise ValueError(f"growth_factor must be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"backoff_factor must be in (0, 1), got {backoff_factor}")
        if int(growth_interval) != growth_interval or growth_interval < 1:
            raise ValueError(f"growth_interval must be a positive integer, got {growth_interval}")
        if int(hysteresis) != hysteresis or hysteresis < 1:
            raise ValueError(f"hysteresis must be a positive integer, got {hysteresis}")
        if not max_grad_norm >= 0.0:
            raise ValueError(f"max_grad_norm must be >= 0 (0 disables clipping), got {max_grad_norm}")
        self.optimizer = optimizer
        self.dynamic_loss_scale = static_loss_scale is None and bool(dynamic_loss_scale)
        if static_loss_scale is not None:
            scale = float(static_loss_scale)
        else:
            scale = float(initial_scale) if self.dynamic_loss_scale else 1.0
        self._scale = _f32(scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.hysteresis = int(hysteresis)
        self.max_grad_norm = float(max_grad_norm)
        self._growth_tracker = 0
        self._hysteresis_tracker = self.hysteresis
        self.overflow = False          # whether the last step() was skipped
        self.last_grad_norm = 0.0      # global L2 norm of the unscaled gradients at the last step()
        self.skipped_steps = 0

    # --- loss scaling ------------------------------------------------------------------------

    @property
    def loss_scale(self) -> float:
        return self._scale

    cur_scale = loss_scale  # Apex / DeepSpeed name

    def get_scale(self) -> float:
        """The current scale (torch.amp.GradScaler's name)."""
        return self._scale

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self._scale

    def backward(self, loss: torch.Tensor, **kwargs) -> None:
        """scale_loss(loss).backward(**kwargs)."""
        self.scale_loss(loss).backward(**kwargs)

    # --- the step ----------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure=None):
        """Unscales, checks, clips and steps; on inf/NaN gradients skips the step and updates the scale.

        Returns None. After the call, `overflow` says whether the step was skipped and
        `last_grad_norm` holds the global norm of the unscaled gradients (inf / NaN on overflow).
        """
        if closure is not None:
            raise RuntimeError("FP16_Optimizer.step does not take a closure: call backward(loss) first, "
                               "then step() (as with torch.amp.GradScaler)")
        names, grads = self._gradients()
        inv_scale = _f32(1.0 / self._scale)
        # A DLPack capsule is consumed by the call that reads it: one set per engine call.
        norm, found_inf = _C.unscale_and_norm(names, [to_dlpack(g) for g in grads], inv_scale)
        self.last_grad_norm = norm
        self.overflow = bool(found_inf)
        if self.overflow:
            self.skipped_steps += 1
            self._update_scale(True)
            return None
        factor = inv_scale
        if self.max_grad_norm > 0:
            clip = self.max_grad_norm / (norm + 1e-6)  # torch.nn.utils.clip_grad_norm_'s coefficient
            if clip < 1.0:
                factor = inv_scale * clip
        if getattr(type(self.optimizer), "_accepts_grad_scale", False):
            self.optimizer.step(grad_scale=factor)
        else:
            if factor != 1.0 and grads:
                _C.scale_grads(names, [to_dlpack(g) for g in grads], factor)
            self.optimizer.step()
        self._update_scale(False)
        return None

    def _gradients(self):
        """(names, detached tensors) of every gradient in the wrapped optimizer's groups, checked."""
        names, grads = [], []
        for gi, group in enumerate(self.optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                g = p.grad
                if g is None:
                    continue
                where = f"param_groups[{gi}][{i}]"
                if g.layout is not torch.strided:
                    raise RuntimeError(f"FP16_Optimizer does not support sparse gradients: {where} has a "
                                       f"{g.layout} gradient")
                if not g.is_cpu:
                    raise ValueError(f"FP16_Optimizer runs on the CPU: the gradient of {where} is on {g.device}")
                if g.dtype is not torch.float32:
                    raise TypeError(f"FP16_Optimizer supports float32 gradients only (the engine's kernels are "
                                    f"f32): {where} (shape {tuple(p.shape)}) has a {g.dtype} gradient; keep "
                                    f"float32 master parameters and use autocast for 16-bit compute")
                if not g.is_contiguous():  # rescaled in place below: give it a contiguous layout once
                    g = p.grad = g.contiguous()
                names.append(where)
                grads.append(g.detach())
        return names, grads

    def _update_scale(self, found_inf: bool) -> None:
        """torch.amp.GradScaler.update's rule, with hysteresis (a backoff after `hysteresis` consecutive
        overflows; consecutive overflows beyond that back off at each one)."""
        if not self.dynamic_loss_scale:
            return
        if found_inf:
            self._growth_tracker = 0
            self._hysteresis_tracker = max(self._hysteresis_tracker - 1, 0)
            if self._hysteresis_tracker == 0:
                self._scale = _f32(self._scale * self.backoff_factor)
            return
        self._hysteresis_tracker = self.hysteresis
        successful = self._growth_tracker + 1
        if successful == self.growth_interval:
            new_scale = _f32(self._scale * self.growth_factor)
            if math.isfinite(new_scale):
                self._scale = new_scale
            self._growth_tracker = 0
        else:
            self._growth_tracker = successful

    # --- passthrough -------------------------------------------------------------------------

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        if set_to_none is None:
            self.optimizer.zero_grad()
        else:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self.optimizer.param_groups = value

    @property
    def state(self):
        return self.optimizer.state

    @property
    def defaults(self):
        return self.optimizer.defaults

    def add_param_group(self, param_group: dict) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict:
        return {
            "loss_scaler": {
                "scale": self._scale,
                "dynamic": self.dynamic_loss_scale,
                "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor,
                "growth_interval": self.growth_interval,
                "hysteresis": self.hysteresis,
                "growth_tracker": self._growth_tracker,
                "hysteresis_tracker": self._hysteresis_tracker,
            },
            "max_grad_norm": self.max_grad_norm,
            "skipped_steps": self.skipped_steps,
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        missing = {"loss_scaler", "optimizer"} - set(state_dict)
        if missing:
            raise KeyError(f"FP16_Optimizer.load_state_dict: not an FP16_Optimizer state_dict (missing "
                           f"{', '.join(sorted(missing))})")
        scaler = state_dict["loss_scaler"]
        self.optimizer.load_state_dict(state_dict["optimizer"])
        self._scale = _f32(float(scaler["scale"]))
        self.dynamic_loss_scale = bool(scaler.get("dynamic", self.dynamic_loss_scale))
        self.growth_factor = float(scaler.get("growth_factor", self.growth_factor))
        self.backoff_factor = float(scaler.get("backoff_factor", self.backoff_factor))
        self.growth_interval = int(scaler.get("growth_interval", self.growth_interval))
        self.hysteresis = int(scaler.get("hysteresis", self.hysteresis))
        self._growth_tracker = int(scaler.get("growth_tracker", 0))
        self._hysteresis_tracker = int(scaler.get("hysteresis_tracker", self.hysteresis))
        self.max_grad_norm = float(state_dict.get("max_grad_norm", self.max_grad_norm))
        self.skipped_steps = int(state_dict.get("skipped_steps", 0))

    def __repr__(self) -> str:
        mode = "dynamic" if self.dynamic_loss_scale else "static"
        return (f"FP16_Optimizer({mode} scale={self._scale:g}, hysteresis={self.hysteresis}, "
                f"max_grad_norm={self.max_grad_norm:g},\n  {self.optimizer!r})")
