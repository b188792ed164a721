"""RTModule options, as ORTModule users know them, and their environment variables.

Every option has a TRAINRT_* environment variable that takes precedence over code; the ORTMODULE_*
name of an option ORTModule also had is accepted as an alias (the TRAINRT_ name wins when both are set).

    model = trainrt.RTModule(model, trainrt.DebugOptions(save_onnx=True, onnx_prefix="gpt",
                                                         log_level=trainrt.LogLevel.INFO))
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass


class LogLevel(enum.IntEnum):
    VERBOSE = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    FATAL = 4


class FallbackPolicy(enum.IntFlag):
    """Which failures make RTModule run the original module instead (announced once, never silent)."""

    FALLBACK_DISABLE = 0
    FALLBACK_FORCE_TORCH_FORWARD = 1       # always run torch (for debugging the wrapper itself)
    FALLBACK_UNSUPPORTED_DEVICE = 2        # inputs or parameters not on the CPU
    FALLBACK_UNSUPPORTED_DATA = 4          # inputs the engine cannot take (dtype, layout)
    FALLBACK_UNSUPPORTED_TORCH_MODEL = 8   # torch.export cannot capture the module
    FALLBACK_UNSUPPORTED_ONNX_MODEL = 16   # an op without translation, kernel or gradient
    FALLBACK_BAD_INITIALIZATION = 32       # the engine failed while building the programs


# The ONNX opset the capture writes (Gelu-20, Reduce*-18 with axes as inputs, ...): the only one accepted.
ONNX_OPSET = 20


DEFAULT_FALLBACK = (FallbackPolicy.FALLBACK_UNSUPPORTED_DEVICE | FallbackPolicy.FALLBACK_UNSUPPORTED_DATA
                    | FallbackPolicy.FALLBACK_UNSUPPORTED_TORCH_MODEL | FallbackPolicy.FALLBACK_UNSUPPORTED_ONNX_MODEL
                    | FallbackPolicy.FALLBACK_BAD_INITIALIZATION)


def env(name: str, alias: str | None = None) -> str | None:
    """TRAINRT_<name>, else the ORTMODULE_<alias> spelling, else None."""
    value = os.environ.get(f"TRAINRT_{name}")
    if value is None and alias:
        value = os.environ.get(f"ORTMODULE_{alias}")
    return value


def _parse_level(value: str) -> LogLevel:
    try:
        return LogLevel[value.upper()] if not value.isdigit() else LogLevel(int(value))
    except (KeyError, ValueError):
        raise ValueError(f"log level {value!r}: choose one of {', '.join(l.name for l in LogLevel)}") from None


def _parse_flag(value: str) -> bool:
    return value.strip() not in ("0", "false", "False", "")


def parse_mixed_precision(value: str | None) -> str | None:
    """'bf16' (also 'bfloat16') or None (None, '', '0', 'off', 'f32', 'fp32'): the mixed precision option."""
    if value is None or value.strip().lower() in ("", "0", "off", "none", "f32", "fp32", "float32"):
        return None
    if value.strip().lower() in ("bf16", "bfloat16"):
        return "bf16"
    raise ValueError(f"mixed precision {value!r}: choose 'bf16' (matmuls in bf16) or 'off'")


def _parse_fallback(value: str) -> FallbackPolicy:
    policy = FallbackPolicy.FALLBACK_DISABLE
    for part in value.replace("|", ",").split(","):
        part = part.strip()
        if part:
            try:
                policy |= FallbackPolicy[part if part.startswith("FALLBACK_") else f"FALLBACK_{part}"]
            except KeyError:
                raise ValueError(f"fallback policy {part!r}: choose from {', '.join(p.name for p in FallbackPolicy)}") from None
    return policy


@dataclass
class DebugOptions:
    """Debugging aids: save the captured graphs as ONNX, and the log level."""

    save_onnx: bool = False
    onnx_prefix: str = "trainrt"
    save_path: str = "."
    log_level: LogLevel = LogLevel.WARNING

    def __post_init__(self):
        if (v := env("SAVE_ONNX_PATH", "SAVE_ONNX_PATH")) is not None:
            self.save_onnx, self.save_path = True, v
        if (v := env("LOG_LEVEL", "LOG_LEVEL")) is not None:
            self.log_level = _parse_level(v)


# trainrt.enable_custom_autograd_support(False): the default of RuntimeOptions.custom_autograd for
# RTModules made afterwards (ORTModule's function of that name; the environment still wins).
_custom_autograd_default = True


def enable_custom_autograd_support(enable: bool = True) -> None:
    """Keep user autograd.Functions opaque with their own backward (the default), or trace their
    forwards into the graph and differentiate those (their custom backwards are then ignored).
    Applies to RTModules made afterwards; ENABLE_CUSTOM_AUTOGRAD in the environment takes precedence."""
    global _custom_autograd_default
    _custom_autograd_default = bool(enable)


@dataclass
class RuntimeOptions:
    """Engine behaviour: fallback policy, export cache, mixed precision, what to print. Read from the
    environment."""

    fallback_policy: FallbackPolicy = DEFAULT_FALLBACK
    cache_dir: str | None = None
    # Use an export cache directory (or entry) that other users can write to; by default it is refused,
    # since whoever can write an entry chooses the graph every process reading it trains (export_cache.py).
    cache_allow_shared: bool = False
    print_memory_stats: bool = False
    profile: bool = False  # per-node timings of the engine programs (RTModule.profile_summary())
    # After a fallback, try the engine again on the next call instead of staying on PyTorch (a failed
    # capture is otherwise remembered per input schema, so a failing schema is not re-captured each step).
    fallback_retry: bool = False
    print_input_density: bool = False  # log each step's share of non-padding tokens and labels
    compute_optimizer: bool = True  # the engine's graph rewrites (fusions, saved-set choice)
    # "bf16": each op in the dtype torch.autocast("cpu", dtype=torch.bfloat16) gives it (matmuls in
    # bf16 with f32 sums, what follows them on their bf16 results, losses in f32; autocast turns it
    # on per call too); None: f32.
    mixed_precision: str | None = None
    # Each user torch.autograd.Function as one PythonOp node running its own forward and backward
    # (capture/autograd_function.py); False traces their forwards (custom backwards ignored).
    custom_autograd: bool | None = None  # None: enable_custom_autograd_support's setting
    # Full names (module + __qualname__) of Functions whose forwards are traced instead.
    skipped_autograd_functions: tuple[str, ...] = ()
    # Each parameter's gradient leaves the engine's backward as soon as it is final, through torch's
    # AccumulateGrad (hooks, DDP's reducer, DeepSpeed's ZeRO hooks see it then): gradient_handoff.py.
    # None: when something watches gradients (torch.distributed initialized, or a hook on a parameter);
    # True: always; False: every gradient comes at the end of the engine's backward.
    mem_efficient_grad_mgmt: bool | None = None
    # Threads of the engine's loops; None: torch.get_num_threads() at each call (threads.py).
    num_threads: int | None = None

    def __post_init__(self):
        self.mixed_precision = parse_mixed_precision(self.mixed_precision)
        if self.custom_autograd is None:
            self.custom_autograd = _custom_autograd_default
        if (v := env("ENABLE_CUSTOM_AUTOGRAD", "ENABLE_CUSTOM_AUTOGRAD")) is not None:
            self.custom_autograd = _parse_flag(v)
        if (v := env("SKIPPED_AUTOGRAD_FUNCTIONS", "SKIPPED_AUTOGRAD_FUNCTIONS")) is not None:
            self.skipped_autograd_functions = tuple(sorted({n.strip() for n in v.split(",") if n.strip()}))
        if (v := env("ENABLE_MEM_EFFICIENT_GRAD_MGMT", "ENABLE_MEM_EFFICIENT_GRAD_MGMT")) is not None:
            self.mem_efficient_grad_mgmt = None if v.strip().lower() == "auto" else _parse_flag(v)
        if (v := env("NUM_THREADS")) is not None:
            if not v.strip().isdigit() or int(v) < 1:
                raise ValueError(f"TRAINRT_NUM_THREADS={v!r}: a number of threads, at least 1")
            self.num_threads = int(v)
        if (v := env("MIXED_PRECISION")) is not None:
            self.mixed_precision = parse_mixed_precision(v)
        if (v := env("FALLBACK_POLICY", "FALLBACK_POLICY")) is not None:
            self.fallback_policy = _parse_fallback(v)
        if (v := env("CACHE_DIR", "CACHE_DIR")) is not None:
            self.cache_dir = v
        if (v := env("CACHE_ALLOW_SHARED")) is not None:
            self.cache_allow_shared = _parse_flag(v)
        if (v := env("PROFILE")) is not None:
            self.profile = _parse_flag(v)
        if (v := env("PRINT_MEMORY_STATS", "PRINT_MEMORY_STATS")) is not None:
            self.print_memory_stats = _parse_flag(v)
        if (v := env("ENABLE_COMPUTE_OPTIMIZER", "ENABLE_COMPUTE_OPTIMIZER")) is not None:
            self.compute_optimizer = _parse_flag(v)
        if (v := env("PRINT_INPUT_DENSITY", "PRINT_INPUT_DENSITY")) is not None:
            self.print_input_density = _parse_flag(v)
        if (v := env("FALLBACK_RETRY", "FALLBACK_RETRY")) is not None:
            self.fallback_retry = _parse_flag(v)
        if (v := env("ONNX_OPSET_VERSION", "ONNX_OPSET_VERSION")) is not None and v.strip() != str(ONNX_OPSET):
            raise ValueError(f"ONNX opset version {v!r}: TrainRT captures at ONNX opset {ONNX_OPSET} (Gelu-20, "
                             f"Reduce*-18 with axes as inputs), the only version it accepts")
