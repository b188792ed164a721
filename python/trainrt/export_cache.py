"""The export cache: captured graphs stored on disk and reused across processes.

With a cache dir set (`TRAINRT_CACHE_DIR` / `ORTMODULE_CACHE_DIR`), RTModule stores each captured
graph under a key made of everything that changes the graph: the module's structure (repr of every
submodule), the names, dtypes and shapes of its parameters and buffers, the input schema key, and
the torch and TrainRT versions (ORTModule keyed on repr and rank only and served stale graphs). A hit
skips torch.export and the translation.

    cache = ExportCache("/tmp/trainrt-cache")
    captured = cache.load(key) or capture(...)
    cache.store(key, captured)

An entry is data only, so reading one runs nothing: the translated graph as ONNX bytes and the other
fields of the CapturedGraph as JSON, pytree specs included (treespec_json.py; never a pickle, which
runs whatever the file names). One file per key:

    b"TRAINRT-EXPORT-CACHE 4\\n"                 magic and format
    sha256 of the payload, 64 hex digits, b"\\n"
    payload: {"key": ..., "model_bytes": n, "fields": {...}} as one JSON line, b"\\n", n bytes of ONNX

An entry whose magic, format, checksum or key is wrong, that does not decode, or that someone else
could have written is announced (once), captured again and rewritten, so the next process hits. The
checksum catches truncated and corrupt files, not forgeries (anyone can compute a sha256): a forged
entry is kept out by the ownership checks. The directory and each entry must belong to this user
and be writable by no one else (a directory with the sticky bit, like /tmp, may be group- or
world-writable: others cannot replace our entries there, and entries they plant are refused as not
ours); a cache that fails this is refused with the reason, unless `TRAINRT_CACHE_ALLOW_SHARED=1`.
A directory the cache creates is created 0o700. A graph with PythonOp nodes (a user's
autograd.Function) is not stored: they reach their Function through this process's captures.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile

import onnx
import torch

import trainrt
from trainrt.capture import CapturedGraph
from trainrt.capture.export import register_hf_cache_pytree
from trainrt.capture.shape_guards import check_size_expression
from trainrt.treespec_json import spec_from_json, spec_to_json, value_from_json, value_to_json

_log = logging.getLogger("trainrt")
_FORMAT = 8  # 3: pickled entries; 4: ONNX bytes + JSON, checksummed (data only); 5: recompute_regions; 6: layers;
# 7: shape guards; 8: the graph declares export's symbolic dims on its values (value_info)
_MAGIC = b"TRAINRT-EXPORT-CACHE %d\n" % _FORMAT
_SPECS = ("in_spec", "out_spec")
# the functions a compound input dim may call, as str() of torch's size expressions prints them
_SYMPY_SIZE_FUNCTIONS = {"FloorDiv", "CeilDiv", "Mod", "PythonMod", "CleanDiv", "IntTrueDiv", "FloorToInt", "CeilToInt",
                         "TruncToInt", "Max", "Min", "Abs", "floor", "ceiling"}
_announced: set[str] = set()  # warnings given in this process: each once, not once per capture


_UNSET = object()


def cache_key(module: torch.nn.Module, schema_key, structure=_UNSET) -> str:
    """A digest of everything that changes the captured graph. The module's plain attributes count
    (`structure`, shared_captures.key_of(module, None) unless the caller has it: the head count of an
    attention block, which neither repr(module) nor a parameter shape shows); a module with attributes
    that cannot be described by content is keyed by its repr alone."""
    if structure is _UNSET:
        from trainrt import shared_captures

        structure = shared_captures.key_of(module, None)
    h = hashlib.sha256()
    for part in (f"format {_FORMAT}", torch.__version__, trainrt.__version__, repr(module), repr(schema_key),
                 repr(structure)):
        h.update(part.encode())
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}:{t.requires_grad}".encode())
    return h.hexdigest()


def _warn_once(message: str) -> None:
    if message not in _announced:
        _announced.add(message)
        _log.warning("%s", message)


def _shared_write(st: os.stat_result, what: str, path: str) -> str | None:
    """Why another user could write this file or directory, or None."""
    if st.st_uid != os.geteuid():
        return f"{what} {path} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    writable = [who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if writable and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        return f"{what} {path} is writable by {' and '.join(writable)} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


class ExportCache:
    """Captured graphs in `directory`, one data-only file per key, written atomically.
    `allow_shared` skips the ownership checks (TRAINRT_CACHE_ALLOW_SHARED)."""

    def __init__(self, directory: str, allow_shared: bool = False):
        self.directory = directory
        self.allow_shared = allow_shared
        self.refused = self._check_directory()  # why the cache is not used, or None
        if self.refused:
            _warn_once(f"trainrt export cache: not using {directory}: {self.refused}; running uncached")

    def _check_directory(self) -> str | None:
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            st = os.stat(self.directory)
        except OSError as err:
            return f"cannot create it ({err.strerror})"
        why = None if self.allow_shared else _shared_write(st, "directory", self.directory)
        return why and f"{why}, so others could plant entries (TRAINRT_CACHE_ALLOW_SHARED=1 accepts it)"

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.trainrt-capture")

    def has(self, key: str) -> bool:
        """Whether an entry (usable or not) is stored under `key`."""
        return not self.refused and os.path.lexists(self._path(key))

    def load(self, key: str) -> CapturedGraph | None:
        """The entry's capture, or None: no entry, or one that is announced as unusable."""
        if self.refused:
            return None
        path = self._path(key)
        try:
            # O_NOFOLLOW: a planted symlink is not followed; O_NONBLOCK: a planted FIFO does not hang us.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as err:
            return self._unusable(path, f"cannot open it: {err.strerror}")
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())  # of the file opened, so it cannot be swapped after the check
            if not stat.S_ISREG(st.st_mode):
                return self._unusable(path, "not a regular file")
            if not self.allow_shared and (why := _shared_write(st, "entry", path)):
                return self._unusable(path, why)
            data = f.read()
        try:
            captured = _decode(data, key)
        except Exception as err:  # noqa: BLE001  (any unreadable entry is re-captured, never trusted)
            return self._unusable(path, f"{type(err).__name__}: {err}")
        _log.info("trainrt export cache: hit %s", path)
        return captured

    def _unusable(self, path: str, why: str) -> None:
        _warn_once(f"trainrt: export cache entry {path} is unusable ({why}); capturing again and rewriting it")
        return None

    def store(self, key: str, captured: CapturedGraph) -> None:
        """Writes the entry atomically (a file of mode 0o600, renamed over the old one). A capture
        that cannot be stored (a context that is not JSON data, a full disk) is announced and the
        run goes on uncached."""
        if self.refused:
            return
        tmp = None
        try:
            data = _encode(key, captured)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self._path(key))
            _log.info("trainrt export cache: stored %s", self._path(key))
        except Exception as err:  # noqa: BLE001  (caching is an optimization; the capture itself is good)
            _warn_once(f"trainrt export cache: not stored in {self.directory} ({type(err).__name__}: {err}); "
                       "running uncached")
            if tmp and os.path.exists(tmp):
                os.remove(tmp)


def _process_local_calls(graph: onnx.GraphProto) -> list[str]:
    """The autograd.Functions that PythonOp nodes of `graph` (subgraphs included) call. Such a node
    finds its Function by a call id into the registry of this process's captures (trainrt::python_op):
    in another process that id names nothing, or another Function, so the graph is not stored."""
    names = []
    for node in graph.node:
        if node.op_type == "PythonOp":
            names += [a.s.decode() for a in node.attribute if a.name == "function"] or ["?"]
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                names += _process_local_calls(sub)
    return names


def _encode(key: str, captured: CapturedGraph) -> bytes:
    """The entry's bytes. Raises TypeError for a field this format cannot hold, a spec that would
    not read back as itself, or a graph that calls this process's autograd.Functions."""
    if calls := _process_local_calls(captured.model.graph):
        raise TypeError(f"the graph calls autograd.Function {', '.join(sorted(set(calls)))} through PythonOp, "
                        "which only the process that captured it can resolve")
    fields = {}
    for name, value in captured.__dict__.items():
        if name in _SPECS:
            fields[name] = spec_to_json(value)
            if spec_from_json(fields[name]) != value:
                raise TypeError(f"{name} {value} does not read back as itself")
        elif name != "model":
            fields[name] = value_to_json(value)
    model = captured.model.SerializeToString()
    header = json.dumps({"key": key, "model_bytes": len(model), "fields": fields}).encode()
    payload = header + b"\n" + model
    return _MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def _decode(data: bytes, key: str) -> CapturedGraph:
    """The capture in an entry's bytes; ValueError naming what is wrong."""
    if not data.startswith(_MAGIC):
        raise ValueError("not a TrainRT export cache entry of format %d" % _FORMAT)
    digest, payload = data[len(_MAGIC):len(_MAGIC) + 64], data[len(_MAGIC) + 65:]
    if data[len(_MAGIC) + 64:len(_MAGIC) + 65] != b"\n" or hashlib.sha256(payload).hexdigest().encode() != digest:
        raise ValueError("checksum mismatch (truncated or modified)")
    header, _, model = payload.partition(b"\n")
    register_hf_cache_pytree()  # what capture registers before torch.export: DynamicCache in HF outputs
    entry = json.loads(header)
    if entry.get("key") != key:
        raise ValueError("written for another key")
    if entry.get("model_bytes") != len(model):
        raise ValueError("graph size mismatch")
    fields = {name: spec_from_json(v) if name in _SPECS else value_from_json(v) for name, v in entry["fields"].items()}
    _check_size_text(fields)
    return CapturedGraph(model=onnx.load_from_string(model), **fields)


def _check_size_text(fields: dict) -> None:
    """Refuses an entry whose size text (the guards, compound input dims that sympy parses) is more
    than size arithmetic: evaluating it must not run anything an entry's writer chose."""
    for guard in fields.get("guards", []):
        check_size_expression(guard, {"max", "min", "abs"}, {"floor", "ceil", "trunc", "sqrt"})
    for dims in fields.get("input_dims", []):
        for d in dims:
            if isinstance(d, str):
                check_size_expression(d, _SYMPY_SIZE_FUNCTIONS)
