"""What one architecture's run came to, and how an exception from RTModule becomes that.

Statuses, in the order the report lists them:
- ok: 3 training steps agree with eager (losses each step, parameter updates after);
- mismatch: they ran and disagree (`detail` has the figures);
- unstable: they disagree, and either eager in float32 disagrees with eager in float64 as well, or
  eager run on the engine's own weights at each step agrees with it (run.py): the model amplifies
  rounding beyond the tolerances; not a pass;
- untranslated: the capture met ATen ops without a translation (`ops`: op -> FX nodes);
- export: torch.export failed (`detail`: its first line);
- capture: the exported graph has a form capture refuses (an input kind, an output type);
- engine: the engine refused or failed the graph (a kernel or gradient it lacks, a shape error);
- error: RTModule failed otherwise (a Python exception of its own);
- not-built: the sweep could not build the model or its eager step (config, class, inputs);
- timeout, crash: the run's process hung past its limit or died (isolation.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

STATUSES = ("ok", "mismatch", "unstable", "untranslated", "export", "capture", "engine", "error", "not-built", "timeout", "crash")


@dataclass
class Outcome:
    name: str  # task/model_type
    class_name: str
    status: str  # one of STATUSES
    detail: str = ""  # one line: the figures of a mismatch, the error's first line, the reason
    ops: dict[str, int] = field(default_factory=dict)  # untranslated op -> nodes of the graph that use it
    first_step_s: float | None = None  # the engine's first step: capture, engine build, forward, backward
    step_ratio: float | None = None  # the engine's later steps / eager's
    losses: list[tuple[float, float]] = field(default_factory=list)  # (eager, engine) per step

    @property
    def task(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> Outcome:
        return Outcome(**{**d, "losses": [tuple(x) for x in d.get("losses", [])]})


def first_line(err: BaseException | str, limit: int = 240) -> str:
    text = str(err).strip()
    line = text.splitlines()[0] if text else ""
    if isinstance(err, BaseException):
        line = f"{type(err).__name__}: {line}" if line else type(err).__name__
    return line[:limit]


def _chain(err: BaseException):
    """err, then what caused it (RTModule raises its fallback error while handling the capture's)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def classify(err: BaseException) -> tuple[str, str, dict[str, int]]:
    """(status, detail, ops) of an exception raised by an RTModule training step."""
    from trainrt import _C
    from trainrt.capture.errors import CaptureError, UnsupportedATenOp, UnsupportedATenOps

    for e in _chain(err):
        if isinstance(e, UnsupportedATenOp):
            errors = e.errors if isinstance(e, UnsupportedATenOps) else [e]
            ops: dict[str, int] = {}
            for one in errors:
                key = one.op if one.reason == "has no TrainRT translation" else f"{one.op} ({one.reason})"
                ops[key] = ops.get(key, 0) + 1
            return "untranslated", ", ".join(f"{op} x{n}" for op, n in ops.items()), ops
        if isinstance(e, CaptureError):
            text = str(e)
            if not text.startswith("torch.export failed for "):
                return "capture", first_line(text), {}
            # "torch.export failed for Model[ while ...]: reason" -> "[while ...: ]reason"
            where, _, reason = text.removeprefix("torch.export failed for ").partition(": ")
            context = where.partition(" ")[2]
            return "export", first_line(f"{context}: {reason}" if context else reason), {}
        if isinstance(e, _C.Error):
            return "engine", first_line(e), {}
    return "error", first_line(err), {}
