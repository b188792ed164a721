"""How one training step runs in each mode; every mode starts from a copy of the same initial weights.

    eager     PyTorch eager, torch.optim.AdamW(fused=True)
    compile   torch.compile(model) (inductor, default mode), torch.optim.AdamW(fused=True)
    rtmodule  trainrt.RTModule(model), trainrt.optim.FusedAdam (AdamW as torch computes it)
  and, on request (--modes), bf16 mixed precision:
    eager-bf16     eager with the forward under torch.autocast("cpu", dtype=torch.bfloat16)
    rtmodule-bf16  trainrt.RTModule(model, mixed_precision="bf16"), trainrt.optim.FusedAdam
  and bf16 parameters (model.bfloat16(), float inputs cast to bf16, no autocast):
    eager-bf16-params     eager, torch.optim.AdamW(fused=True)
    rtmodule-bf16-params  trainrt.RTModule(model.bfloat16()), trainrt.optim.FusedAdam

A step is zero_grad (to None), forward (the model returns the loss), backward and the optimizer step.
A model whose spec asks for SGD (the tiny one: its step is the front end's fixed cost, not the
optimizer's) gets torch.optim.SGD in every mode.
The `ddp` mode is not one of these: it spawns 2 ranks of its own (DDP_MODE, ddp.py).
"""

from __future__ import annotations

import copy

import torch

LR, WEIGHT_DECAY = 1e-4, 0.01  # torch.optim.AdamW's default decay; the same for every mode


class Mode:
    """A model copy and its optimizer; step(args) runs one training step and returns the loss tensor."""

    name = ""

    def __init__(self, model: torch.nn.Module, sgd: bool = False):
        self.model = self.wrap(copy.deepcopy(model))
        params = self.model.parameters()
        self.optimizer = torch.optim.SGD(params, lr=LR) if sgd else self.make_optimizer(params)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY, fused=True)

    def step(self, args: tuple) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.model(*args)
        loss.backward()
        self.optimizer.step()
        return loss

    def problem(self) -> str | None:
        """Why the mode did not run what it claims to run (after its first step), or None."""
        return None

    def engine_memory(self) -> dict | None:
        """The engine's planned memory, for modes that have one."""
        return None

    def engine_optimizer_state_bytes(self) -> int:
        """Bytes of optimizer state in engine storage (trainrt's optimizers keep it there)."""
        return 0


class Eager(Mode):
    name = "eager"


class Compile(Mode):
    name = "compile"

    def wrap(self, model):
        return torch.compile(model)


class RT(Mode):
    name = "rtmodule"

    def wrap(self, model):
        import trainrt

        return trainrt.RTModule(model)

    def make_optimizer(self, params):
        from trainrt.optim import AdamWMode, FusedAdam

        return FusedAdam(params, lr=LR, weight_decay=WEIGHT_DECAY, adam_w_mode=AdamWMode.ADAMW_TORCH)

    def problem(self):
        reason = self.model._fallback_reason
        return None if reason is None else f"fell back to PyTorch: {reason}"

    def engine_optimizer_state_bytes(self):
        return sum(t.untyped_storage().nbytes() for state in self.optimizer.state.values()
                   for t in state.values() if isinstance(t, torch.Tensor))

    def engine_memory(self):
        """Summed over engines: planned arena bytes and the arena reserved (forward and backward share
        one block: the larger), the dynamic peak bytes of both programs, and the output storage the
        programs keep to write again next step (the model's outputs; saved values and gradients are
        let go of, as eager does, once the backward and the optimizer are done with them), and the
        bytes the last forward saved for its backward: in storage of their own, and in the arena's
        idle bytes (part of the arena already)."""
        total = {"planned_arena_bytes": 0, "arena_capacity_bytes": 0, "peak_dynamic_bytes": 0,
                 "kept_output_bytes": 0, "saved_value_bytes": 0, "saved_in_arena_bytes": 0}
        for engine in self.model.engines:
            stats = engine.programs.memory_stats()
            programs = stats.values()
            total["planned_arena_bytes"] += max(p["planned_arena_bytes"] for p in programs)
            total["arena_capacity_bytes"] += max(p["arena_capacity"] for p in programs)
            total["peak_dynamic_bytes"] += sum(p["peak_dynamic_bytes"] for p in programs)
            total["kept_output_bytes"] += stats["forward"]["output_bytes"] + stats["backward"]["output_bytes"]
            # The last forward's, freed in its backward; those in the arena's idle bytes count as arena.
            total["saved_value_bytes"] += stats["forward"]["saved_bytes"] - stats["forward"]["saved_in_arena_bytes"]
            total["saved_in_arena_bytes"] += stats["forward"]["saved_in_arena_bytes"]
        return total


class RTCodegen(RT):
    """RTModule with generated elementwise kernels (TRAINRT_USE_CODEGEN=1, read when it is built)."""

    name = "rtmodule-codegen"

    def wrap(self, model):
        import os

        previous = os.environ.get("TRAINRT_USE_CODEGEN")
        os.environ["TRAINRT_USE_CODEGEN"] = "1"
        try:
            return super().wrap(model)
        finally:
            if previous is None:
                del os.environ["TRAINRT_USE_CODEGEN"]
            else:
                os.environ["TRAINRT_USE_CODEGEN"] = previous


class EagerBF16(Mode):
    name = "eager-bf16"

    def step(self, args: tuple) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = self.model(*args)
        loss.backward()
        self.optimizer.step()
        return loss


class RTBF16(RT):
    name = "rtmodule-bf16"

    def wrap(self, model):
        import trainrt

        return trainrt.RTModule(model, mixed_precision="bf16")


def _bf16_inputs(args: tuple) -> tuple:
    return tuple(a.bfloat16() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)


class EagerBF16Params(Mode):
    name = "eager-bf16-params"

    def wrap(self, model):
        return model.bfloat16()

    def step(self, args: tuple) -> torch.Tensor:
        return super().step(_bf16_inputs(args))


class RTBF16Params(RT):
    name = "rtmodule-bf16-params"

    def wrap(self, model):
        return super().wrap(model.bfloat16())

    def step(self, args: tuple) -> torch.Tensor:
        return super().step(_bf16_inputs(args))


MODES: dict[str, type[Mode]] = {m.name: m for m in (Eager, Compile, RT, RTCodegen, EagerBF16, RTBF16, EagerBF16Params,
                                                    RTBF16Params)}
DEFAULT_MODES = [Eager.name, Compile.name, RT.name]
DDP_MODE = "ddp"  # on request: 2 spawned ranks per model, eager and RTModule DDP (trainrt.bench.ddp)
