"""RTModule options, as ORTModule users know them, and their environment variables.

Every option has a `TRAINRT_*` environment variable that takes precedence over code; the
`ORTMODULE_*` name of an option ORTModule also had is accepted as an alias (the `TRAINRT_` name wins
when both are set). `OPTIONS` defines them all, once: the name, the alias, the type, the effect, and
what it sets; `DebugOptions` and `RuntimeOptions` read the environment through it, and
`python -m trainrt.options --markdown` writes docs/options.md from it.

Example:

    >>> import torch, trainrt
    >>> options = trainrt.DebugOptions(save_onnx=True, onnx_prefix="gpt", log_level=trainrt.LogLevel.INFO)
    >>> model = trainrt.RTModule(torch.nn.Linear(4, 2), options)
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["DebugOptions", "FallbackPolicy", "LogLevel", "Option", "OPTIONS", "RuntimeOptions",
           "enable_custom_autograd_support", "markdown"]


class LogLevel(enum.IntEnum):
    """How much RTModule logs (the `trainrt` logger): VERBOSE is Python's DEBUG, FATAL its CRITICAL.

    Example:

        >>> trainrt.DebugOptions(log_level=trainrt.LogLevel.INFO).log_level   # INFO shows the start-up table
        <LogLevel.INFO: 1>
    """

    VERBOSE = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    FATAL = 4


class FallbackPolicy(enum.IntFlag):
    """Which failures make RTModule run the original module instead (announced once, never silent).

    It is set by `TRAINRT_FALLBACK_POLICY` (names joined by `|` or `,`), read when an RTModule is
    made; `model.fallback_reason` says why the last call ran in PyTorch.

    Example:

        >>> os.environ["TRAINRT_FALLBACK_POLICY"] = "FALLBACK_DISABLE"   # or in the shell: failures raise
        >>> trainrt.options.RuntimeOptions().fallback_policy
        <FallbackPolicy.FALLBACK_DISABLE: 0>
    """

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


def _parse_names(value: str) -> tuple[str, ...]:
    return tuple(sorted({n.strip() for n in value.split(",") if n.strip()}))


def _check_opset(value: str) -> None:
    if value.strip() != str(ONNX_OPSET):
        raise ValueError(f"ONNX opset version {value!r}: TrainRT captures at ONNX opset {ONNX_OPSET} (Gelu-20, "
                         f"Reduce*-18 with axes as inputs), the only version it accepts")


@dataclass
class DebugOptions:
    """Debugging aids: save the captured graphs as ONNX, and the log level.

    `save_onnx` writes `<save_path>/<onnx_prefix>_forward.onnx` (the capture), `_training.onnx`
    (forward + backward) and `_optimized_forward.onnx` / `_optimized_backward.onnx` (the programs the
    engine runs) when a capture is built. `TRAINRT_SAVE_ONNX_PATH` and `TRAINRT_LOG_LEVEL` override
    the arguments (docs/options.md).

    Example:

        >>> options = trainrt.DebugOptions(save_onnx=True, onnx_prefix="mlp", save_path="out")
        >>> model = trainrt.RTModule(torch.nn.Linear(4, 2), options)
        >>> model(torch.randn(3, 4)).sum().backward()     # writes out/mlp_forward.onnx, ...
    """

    save_onnx: bool = False
    onnx_prefix: str = "trainrt"
    save_path: str = "."
    log_level: LogLevel = LogLevel.WARNING

    def __post_init__(self):
        _read_environment(self)


# trainrt.enable_custom_autograd_support(False): the default of RuntimeOptions.custom_autograd for
# RTModules made afterwards (ORTModule's function of that name; the environment still wins).
_custom_autograd_default = True


def enable_custom_autograd_support(enable: bool = True) -> None:
    """Keep user autograd.Functions opaque with their own backward (the default), or trace their
    forwards into the graph and differentiate those (their custom backwards are then ignored).
    Applies to RTModules made afterwards; ENABLE_CUSTOM_AUTOGRAD in the environment takes precedence.

    Example:

        >>> trainrt.enable_custom_autograd_support(False)   # as ORTModule's function of that name
        >>> model = trainrt.RTModule(torch.nn.Linear(4, 2))  # a Function it calls would be traced
    """
    global _custom_autograd_default
    _custom_autograd_default = bool(enable)


@dataclass
class RuntimeOptions:
    """Engine behaviour: fallback policy, export cache, mixed precision, what to print. Read from the
    environment (`OPTIONS`, docs/options.md); RTModule makes one when it is constructed.

    Example:

        >>> os.environ["TRAINRT_CACHE_DIR"] = "/tmp/trainrt-cache"
        >>> trainrt.options.RuntimeOptions().cache_dir
        '/tmp/trainrt-cache'
    """

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
    sparse_optimizer: bool = True  # losses with ignored labels run on the counted rows only
    embedding_sparse_optimizer: bool = False  # the attention mask's padding leaves the row-wise ops
    # Elementwise chains of the engine programs as generated C++ kernels (src/trainrt/kernels/codegen/).
    use_codegen: bool = False
    codegen_debug: bool = False  # writes the fused subgraphs and generated sources into codegen_debug/
    # Op tuning (src/trainrt/kernels/cpu/op_tuning.h): measure each matrix product's splits over the
    # threads on its real shapes, keep the fastest; results saved to / read from tuning_results_path.
    enable_tuning: bool = False
    max_tuning_duration_ms: float = 30.0
    tuning_results_path: str | None = None
    # "bf16": each op in the dtype torch.autocast("cpu", dtype=torch.bfloat16) gives it (matmuls in
    # bf16 with f32 sums, what follows them on their bf16 results, losses in f32; autocast turns it
    # on per call too); None: f32.
    mixed_precision: str | None = None
    # Each user torch.autograd.Function as one PythonOp node running its own forward and backward
    # (capture/autograd_function.py); False traces their forwards (custom backwards ignored).
    custom_autograd: bool | None = None  # None: enable_custom_autograd_support's setting
    # Full names (module + __qualname__) of Functions whose forwards are traced instead.
    skipped_autograd_functions: tuple[str, ...] = ()
    # torch.utils.checkpoint blocks are recomputed in the engine's backward (capture/checkpoint_regions.py);
    # False keeps their activations like any other's (faster, more memory), without editing the model.
    allow_autograd_checkpoint: bool = True
    # Each parameter's gradient leaves the engine's backward as soon as it is final, through torch's
    # AccumulateGrad (hooks, DDP's reducer, DeepSpeed's ZeRO hooks see it then): gradient_handoff.py.
    # None: when something watches gradients (torch.distributed initialized, or a hook on a parameter);
    # True: always; False: every gradient comes at the end of the engine's backward.
    mem_efficient_grad_mgmt: bool | None = None
    # Threads of the engine's loops; None: torch.get_num_threads() at each call (threads.py).
    num_threads: int | None = None
    # What the backward recomputes in each repeated layer: 0 the cheap rules only, 1 all but the
    # products' outputs, 2 everything (src/trainrt/plan/layer_recompute.h).
    memory_opt_level: int = 0
    # Per-pattern recompute choices in ORTModule's format, "<pattern>:<0|1>:<count>,..."
    # (src/trainrt/plan/recompute_subgraphs.h); empty: the cheap patterns only.
    memory_opt_config: str = ""
    # The step's peak beyond parameters and optimizer state to fit, in MiB (memory_budget.py); None: no budget.
    memory_budget_mb: float | None = None

    def __post_init__(self):
        self.mixed_precision = parse_mixed_precision(self.mixed_precision)
        if self.custom_autograd is None:
            self.custom_autograd = _custom_autograd_default
        _read_environment(self)


@dataclass(frozen=True)
class Option:
    """One environment variable: `TRAINRT_<name>` (and `ORTMODULE_<alias>`), what it sets and how.

    `owner.field` is set to `parse(value)` (`also` runs after it, for a second field); an option
    without a field only checks its value. `default` is what applies when the variable is unset, as
    the docs say it; None takes the field's own default.

    Example:

        >>> option = next(o for o in trainrt.options.OPTIONS if o.name == "CACHE_DIR")
        >>> option.variable, option.alias_variable
        ('TRAINRT_CACHE_DIR', 'ORTMODULE_CACHE_DIR')
    """

    name: str
    alias: str | None  # ORTModule's variable had this name; None: TrainRT's own
    owner: type  # DebugOptions or RuntimeOptions
    field: str | None
    parse: Callable[[str], Any]
    type: str  # how a value is written
    effect: str  # what it does (markdown)
    default: str | None = None
    also: Callable[[Any], None] | None = None

    @property
    def variable(self) -> str:
        return f"TRAINRT_{self.name}"

    @property
    def alias_variable(self) -> str | None:
        return f"ORTMODULE_{self.alias}" if self.alias else None

    def apply(self, options) -> None:
        """Sets `options` from the environment when the variable (or its alias) is set."""
        value = env(self.name, self.alias)
        if value is None:
            return
        parsed = self.parse(value)
        if self.field is not None:
            setattr(options, self.field, parsed)
        if self.also is not None:
            self.also(options)

    def default_text(self) -> str:
        """The default as the docs write it."""
        if self.default is not None:
            return self.default
        value = next(f.default for f in dataclasses.fields(self.owner) if f.name == self.field)
        return _doc_value(value)


def _doc_value(value) -> str:
    if isinstance(value, bool):
        return f"`{int(value)}`"
    if isinstance(value, enum.Flag):
        return "`" + "\\|".join(m.name for m in type(value) if m.value and m in value) + "`"
    if isinstance(value, enum.Enum):
        return f"`{value.name}`"
    if value is None:
        return "unset"
    if value == ():
        return "none"
    return f"`{value}`"


_FLAG = "flag: `0`, `false` or empty is off, anything else on"


def _save_onnx(options: DebugOptions) -> None:
    options.save_onnx = True


def _parse_auto_flag(value: str) -> bool | None:
    return None if value.strip().lower() == "auto" else _parse_flag(value)


def _parse_memory_level(value: str) -> int:
    if value.strip() not in ("0", "1", "2"):
        raise ValueError(f"memory optimization level {value!r}: choose 0, 1 or 2")
    return int(value)


def _parse_memory_config(value: str) -> str:
    from trainrt import _C

    try:
        _C.parse_memory_opt_config(value)
    except _C.Error as err:
        raise ValueError(str(err)) from None
    return value


def _positive(variable: str, unit: str) -> Callable[[str], float]:
    """A parser of a positive number, whose error names the variable and the unit."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not number > 0:
            raise ValueError(f"TRAINRT_{variable}={value!r}: a positive number of {unit}")
        return number

    return parse


_parse_budget = _positive("MEMORY_BUDGET_MB", "MiB")
_parse_duration = _positive("MAX_TUNING_DURATION_MS", "milliseconds")


def _parse_threads(value: str) -> int:
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"TRAINRT_NUM_THREADS={value!r}: a number of threads, at least 1")
    return int(value)


OPTIONS: tuple[Option, ...] = (
    Option("LOG_LEVEL", "LOG_LEVEL", DebugOptions, "log_level", _parse_level,
           "`VERBOSE`, `INFO`, `WARNING`, `ERROR`, `FATAL` (or `0`-`4`)",
           "Level of the `trainrt` logger, RTModule's messages: fallbacks at WARNING, the start-up table "
           "(what is on, capture and build times) at INFO. Code: `DebugOptions(log_level=...)`. The C++ "
           "engine's own log is set apart, by `trainrt.set_log_level`."),
    Option("SAVE_ONNX_PATH", "SAVE_ONNX_PATH", DebugOptions, "save_path", str, "directory",
           "Saves each capture's graphs there as ONNX: `<prefix>_forward.onnx` (the capture), "
           "`_training.onnx` (forward + backward), `_optimized_forward.onnx` and `_optimized_backward.onnx` "
           "(the programs the engine runs); an eval-mode capture's files have `_eval` after the prefix. Code: `DebugOptions(save_onnx=True, save_path=..., onnx_prefix=...)`.",
           default="unset: nothing saved", also=_save_onnx),
    Option("FALLBACK_POLICY", "FALLBACK_POLICY", RuntimeOptions, "fallback_policy", _parse_fallback,
           "`FALLBACK_*` names joined by `\\|` or `,` (the prefix may be left out)",
           "Which failures run the original PyTorch module instead of the engine (announced once per reason; "
           "`model.fallback_reason` tells why): `FALLBACK_DISABLE` makes every failure an error, "
           "`FALLBACK_FORCE_TORCH_FORWARD` always runs PyTorch. The names are `trainrt.FallbackPolicy`'s."),
    Option("FALLBACK_RETRY", "FALLBACK_RETRY", RuntimeOptions, "fallback_retry", _parse_flag, _FLAG,
           "After a fallback, try the engine again on the next call; otherwise a failed capture is remembered "
           "per input schema and not attempted again."),
    Option("CACHE_DIR", "CACHE_DIR", RuntimeOptions, "cache_dir", str, "directory",
           "Export cache across processes: a hit skips torch.export and the translation. Entries are data "
           "only (ONNX bytes and JSON, checked on load), keyed on everything that changes the graph (the "
           "module's structure, its parameters' and buffers' names, dtypes and shapes, the input schema, which "
           "autograd.Functions stay opaque, the torch and TrainRT versions); graphs with PythonOp nodes are "
           "not stored.",
           default="unset: no cache"),
    Option("CACHE_ALLOW_SHARED", None, RuntimeOptions, "cache_allow_shared", _parse_flag, _FLAG,
           "Use a cache directory or entry that other users can write to; by default such a cache is refused "
           "with the reason, since whoever writes an entry chooses the graph a reader trains."),
    Option("MIXED_PRECISION", None, RuntimeOptions, "mixed_precision", parse_mixed_precision,
           "`bf16` (or `bfloat16`), or `off` (also `0`, `none`, `f32`, `fp32`, empty)",
           "`bf16` computes each op in the dtype `torch.autocast(\"cpu\", dtype=torch.bfloat16)` gives it "
           "(matmuls, convolutions and attention in bf16 with f32 sums; parameters and gradients stay f32). "
           "Code: `RTModule(model, mixed_precision=\"bf16\")`, or call it under that autocast.",
           default="`off`"),
    Option("ENABLE_COMPUTE_OPTIMIZER", "ENABLE_COMPUTE_OPTIMIZER", RuntimeOptions, "compute_optimizer",
           _parse_flag, _FLAG,
           "`0` turns the engine's graph rewrites off: the fusion passes and the saved-value choices "
           "(checkpointed blocks are still recomputed)."),
    Option("ENABLE_SPARSE_OPTIMIZER", "ENABLE_SPARSE_OPTIMIZER", RuntimeOptions, "sparse_optimizer", _parse_flag,
           _FLAG,
           "Label sparsity: a cross-entropy or NLL loss with `ignore_index` and a mean or sum reduction runs on "
           "the rows whose label counts (gathered once per step; the row count is a run-time dim, planned per "
           "multiple of 64 rows). The LM head and the row-wise ops before it move onto those rows where "
           "nothing else reads their full result; where something does (the logits, a model output, still "
           "come back whole), the loss, softmax and the products' gradients run on the valid rows. Losses and "
           "gradients are eager's. Needs the compute optimizer; the start-up table says how many losses it "
           "rewrote."),
    Option("ENABLE_EMBEDDING_SPARSE_OPTIMIZER", "ENABLE_EMBEDDING_SPARSE_OPTIMIZER", RuntimeOptions,
           "embedding_sparse_optimizer", _parse_flag, _FLAG,
           "Padding elimination: the tokens the attention mask marks as padding (and no loss counts) leave "
           "every row-wise op, from the embeddings through the projections, norms and MLPs to the loss; only "
           "attention sees the padded sequence. Losses and gradients are eager's, and so are the model's outputs "
           "at real tokens; at padded positions its token-major outputs (logits, hidden states) are zeros, as "
           "with ORTModule's, and an attention cache holds unspecified values, which is why it is off by "
           "default. It fires where it can prove the dropped rows reach no kept row: between the "
           "embeddings and the loss, only ops that work position by position and attention masked by the "
           "model's attention mask input; the start-up table says how many ops it moved, or why it did not "
           "fire. Needs the compute optimizer.", default="`0`"),
    Option("USE_CODEGEN", "USE_TRITON", RuntimeOptions, "use_codegen", _parse_flag, _FLAG,
           "Code generation, the CPU's counterpart of ORTModule's Triton path: each chain of elementwise ops in "
           "the forward and backward programs (activations and their gradients, residual adds, norm scales, "
           "masks) becomes one generated, vectorized C++ kernel that reads its inputs and writes its results "
           "once. Kernels are compiled at first use by the C++ compiler the build used, in one unit per "
           "model (forward and backward together), and kept on disk (`<TRAINRT_CACHE_DIR>/codegen`, else `~/.cache/trainrt/codegen`, a "
           "directory only you may write; another is not read), so a second process compiles nothing. Without "
           "a compiler, or when a compile fails, the ops run unfused and a warning says why. Results are the "
           "unfused kernels' within rounding. Needs the compute optimizer; the start-up table says how many "
           "ops it fused and what compiling cost.", default="`0`"),
    Option("CODEGEN_DEBUG", "TRITON_DEBUG", RuntimeOptions, "codegen_debug", _parse_flag, _FLAG,
           "Writes each fused subgraph (`<symbol>.txt`: the ops it replaced, then its generated function) and "
           "each compiled unit's source (`<unit>.cc`) into `codegen_debug/` in the working directory.",
           default="`0`"),
    Option("ENABLE_TUNING", "ENABLE_TUNING", RuntimeOptions, "enable_tuning", _parse_flag, _FLAG,
           "Op tuning: the first time a matrix product of a new shape runs, its ways of splitting over the "
           "threads (column or row blocks of 64, 128, 256 or one per thread, or whole) are timed on the real "
           "operands and the fastest is kept for the rest of the process (and written to "
           "`TRAINRT_TUNING_RESULTS_PATH` when set). Costs up to `TRAINRT_MAX_TUNING_DURATION_MS` per shape, "
           "once.", default="`0`"),
    Option("MAX_TUNING_DURATION_MS", "MAX_TUNING_DURATION_MS", RuntimeOptions, "max_tuning_duration_ms",
           _parse_duration, "milliseconds, a positive number", "Time op tuning may spend measuring one shape."),
    Option("TUNING_RESULTS_PATH", "TUNING_RESULTS_PATH", RuntimeOptions, "tuning_results_path", str, "file path",
           "A JSON file of tuning choices, keyed by op, dtypes, shapes and threads, with the CPU model and the "
           "oneDNN and TrainRT versions they were measured with. Written after each new choice when tuning is "
           "on; read, with no measuring, when it is off. A file made on another CPU or with other library "
           "versions, or malformed, is ignored with a warning."),
    Option("ENABLE_CUSTOM_AUTOGRAD", "ENABLE_CUSTOM_AUTOGRAD", RuntimeOptions, "custom_autograd", _parse_flag,
           _FLAG,
           "On: each user `torch.autograd.Function` runs as one `PythonOp` node with its own forward and "
           "backward. `0`: their forwards are traced into the graph and differentiated (the custom backwards "
           "are ignored, announced once). Code: `trainrt.enable_custom_autograd_support(False)`.",
           default="`1` (`enable_custom_autograd_support(False)` makes it `0`)"),
    Option("SKIPPED_AUTOGRAD_FUNCTIONS", "SKIPPED_AUTOGRAD_FUNCTIONS", RuntimeOptions, "skipped_autograd_functions",
           _parse_names, "comma-separated full names (`module.Qual.Name`)",
           "Functions whose forwards are traced into the graph instead of running as `PythonOp`."),
    Option("ALLOW_AUTOGRAD_CHECKPOINT", "ALLOW_AUTOGRAD_CHECKPOINT", RuntimeOptions, "allow_autograd_checkpoint",
           _parse_flag, _FLAG,
           "On: blocks run under `torch.utils.checkpoint` (both modes, `checkpoint_sequential`, HF "
           "`gradient_checkpointing_enable()`) are captured into the engine, which recomputes them in its "
           "backward and saves only their inputs (never handed back to PyTorch). `0`: the same ops, their "
           "activations saved as any other's: a faster step for more memory, without changing the model.",
           default="`1`"),
    Option("ENABLE_MEM_EFFICIENT_GRAD_MGMT", "ENABLE_MEM_EFFICIENT_GRAD_MGMT", RuntimeOptions,
           "mem_efficient_grad_mgmt", _parse_auto_flag, "`auto`, or a flag (" + _FLAG + ")",
           "Each parameter's gradient leaves the engine's backward as soon as it is final, through torch's "
           "AccumulateGrad: its hooks, DDP's reducer (the all-reduce overlaps the backward) and DeepSpeed's "
           "ZeRO hooks see it then. `auto`: when something watches (torch.distributed is initialized, or a "
           "post-accumulate-grad hook is on a parameter). While on, `torch.autograd.grad` of parameters is "
           "refused by torch (python/trainrt/gradient_handoff.py says why).",
           default="`auto`"),
    Option("MEMORY_OPT_LEVEL", "MEMORY_OPT_LEVEL", RuntimeOptions, "memory_opt_level", _parse_memory_level,
           "`0`, `1` or `2`",
           "What the backward recomputes instead of saving in each repeated layer (transformer block): `0` "
           "the planner's cheap rules only; `1` everything but the products' outputs (GEMMs, convolutions, "
           "fused attention are never run again); `2` everything, products too, as checkpointing each block "
           "would. Dropout is never recomputed; gradients are the same bits. At INFO the start-up table says "
           "what it recomputed."),
    Option("MEMORY_OPT_CONFIG", "MEMORY_OPT_CONFIG", RuntimeOptions, "memory_opt_config", _parse_memory_config,
           "`<pattern>:<0|1>:<count>,...`",
           "Per-subgraph recompute, in ORTModule's format: each item names a pattern of the memory optimizer's "
           "summary (logged at INFO after the start-up table, e.g. `LayerNormalization+`), `1` to recompute it "
           "in the backward instead of saving its output or `0` to keep saving it, and how many occurrences in "
           "forward order (`-1` all). A pattern not named is recomputed when it is cheap (pointwise ops, views, "
           "casts and norms moving at most 4 bytes per byte freed); products and softmax only on request. "
           "Gradients are the same bits. Type `2` (compromised recompute) is refused.",
           default="empty: the cheap patterns"),
    Option("MEMORY_BUDGET_MB", None, RuntimeOptions, "memory_budget_mb", _parse_budget, "MiB, a positive number",
           "The most a training step may hold beyond parameters and optimizer state (engine arena, saved "
           "values, gradients). At the first call of each input schema RTModule measures one trial step of "
           "each plan, from the least recompute to the most (the settings as given; every recompute pattern of "
           "the summary; memory level 1; level 2), keeps the first that fits and says which in the start-up "
           "table; when none fits it keeps the smallest and warns by how much it misses. Not applied to "
           "models with autograd.Functions.",
           default="unset: no budget"),
    Option("NUM_THREADS", None, RuntimeOptions, "num_threads", _parse_threads, "integer, at least 1",
           "Threads of the engine's loops (oneDNN runs inside them on one thread); unset: "
           "`torch.get_num_threads()` at each call, which follows `torch.set_num_threads` and "
           "`OMP_NUM_THREADS` (torchrun sets 1 per rank).",
           default="unset: torch's"),
    Option("PRINT_MEMORY_STATS", "PRINT_MEMORY_STATS", RuntimeOptions, "print_memory_stats", _parse_flag, _FLAG,
           "Logs the engine's memory after every call, at WARNING: per program (forward, backward) the "
           "planned arena, its capacity, run-time sized bytes, the arena's lower bound and the output storage "
           "kept between steps (saved values, gradients)."),
    Option("PRINT_INPUT_DENSITY", "PRINT_INPUT_DENSITY", RuntimeOptions, "print_input_density", _parse_flag,
           _FLAG,
           "Logs each step's share of embedding inputs that are not padding and of labels that are not "
           "ignored, at WARNING; and what the sparse optimizers skipped: the rows label sparsity's loss reads, "
           "the tokens padding elimination runs and the GFLOPs of products the dropped ones skip."),
    Option("PROFILE", None, RuntimeOptions, "profile", _parse_flag, _FLAG,
           "Per-node timings of the engine programs: `model.profile_summary()` (op types by total time) and "
           "`model.write_profile(prefix)` (Chrome traces, with an `engine storage MiB` counter after each node: "
           "where a step's memory peaks)."),
    Option("ONNX_OPSET_VERSION", "ONNX_OPSET_VERSION", RuntimeOptions, None, _check_opset, "integer",
           f"Checked only: the capture writes ONNX opset {ONNX_OPSET}, and any other value is refused with "
           "a ValueError.", default=f"`{ONNX_OPSET}`"),
)
"""Every environment variable TrainRT reads, in the order docs/options.md lists them.

Example:

    >>> [o.variable for o in trainrt.options.OPTIONS][:2]
    ['TRAINRT_LOG_LEVEL', 'TRAINRT_SAVE_ONNX_PATH']
"""

# ORTModule variables TrainRT does not read (setting them changes nothing), and why.
_NOT_READ = (
    (("USE_EFFICIENT_ATTENTION",),
     "not needed: `scaled_dot_product_attention` becomes the engine's fused attention where it applies"),
    (("DEEPCOPY_BEFORE_MODEL_EXPORT",), "not needed: capture exports the module itself, without a copy"),
    (("TRITON_CONFIG_FILE", "USE_FLASH_ATTENTION"),
     "GPU only; code generation for the CPU is `TRAINRT_USE_CODEGEN`, which needs no config file"),
)


def _read_environment(options) -> None:
    for option in OPTIONS:
        if isinstance(options, option.owner):
            option.apply(options)


def markdown() -> str:
    """docs/options.md: every option of `OPTIONS` with its variables, type, default and effect.

    Example:

        >>> trainrt.options.markdown().splitlines()[0]     # python -m trainrt.options --markdown
        '# Options and environment variables'
    """
    cell = lambda text: text.replace("\n", " ")  # noqa: E731
    lines = [
        "# Options and environment variables",
        "",
        "<!-- Generated by `python -m trainrt.options --markdown > docs/options.md` from the option",
        "     definitions in python/trainrt/options.py (OPTIONS); tests/python/test_docs.py checks it. -->",
        "",
        "Each option is an environment variable `TRAINRT_<NAME>`. Where ORTModule had the option, its",
        "`ORTMODULE_<NAME>` spelling is accepted too, and the `TRAINRT_` one wins when both are set. A variable",
        "takes precedence over the code (`DebugOptions(...)`, `RTModule(..., mixed_precision=...)`,",
        "`trainrt.enable_custom_autograd_support(...)`). The variables are read when an RTModule (or a",
        "`DebugOptions`) is made; a value outside a variable's choices raises a ValueError naming them.",
        "`python -m trainrt.options` shows what the current environment sets.",
        "",
        "| variable | ORTModule alias | type | default | effect |",
        "|---|---|---|---|---|",
    ]
    for o in OPTIONS:
        alias = f"`{o.alias_variable}`" if o.alias_variable else "-"
        lines.append(f"| `{o.variable}` | {alias} | {cell(o.type)} | {o.default_text()} | {cell(o.effect)} |")
    lines += ["", "## ORTModule variables TrainRT does not read", "",
              "Setting these changes nothing; each line says why or what takes its place.", ""]
    lines += [f"- {', '.join(f'`ORTMODULE_{n}`' for n in names)}: {why}." for names, why in _NOT_READ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainrt.options", description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print docs/options.md")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown())
        return 0
    for o in OPTIONS:
        value = os.environ.get(o.variable)
        source = o.variable if value is not None else o.alias_variable
        value = value if value is not None else env(o.name, o.alias)
        print(f"{o.variable:36} {'unset' if value is None else repr(value) + ' (' + source + ')'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
