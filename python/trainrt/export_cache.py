"""The export cache: captured graphs stored on disk and reused across processes.

With a cache dir set (`TRAINRT_CACHE_DIR` / `ORTMODULE_CACHE_DIR`), RTModule stores each captured
graph under a key made of everything that changes the graph: the module's structure (repr of every
submodule), the names, dtypes and shapes of its parameters and buffers, the input schema key, and
the torch and TrainRT versions (ORTModule keyed on repr and rank only and served stale graphs). An
entry that cannot be read back (truncated, corrupt, written by another version) is removed and the
module is captured again.

    cache = ExportCache("/tmp/trainrt-cache")
    captured = cache.load(key) or capture(...)
    cache.store(key, captured)
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile

import onnx
import torch
from torch.utils import _pytree as pytree

import trainrt
from trainrt.capture import CapturedGraph

_log = logging.getLogger("trainrt")
_FORMAT = 3  # 2: CapturedGraph records input_dims and dim_ranges (symbolic dims); 3: bf16 captures
# keep bf16 activations (capture/autocast.py), so a format-2 bf16 graph is stale


def cache_key(module: torch.nn.Module, schema_key) -> str:
    """A digest of everything that changes the captured graph."""
    h = hashlib.sha256()
    for part in (f"format {_FORMAT}", torch.__version__, trainrt.__version__, repr(module), repr(schema_key)):
        h.update(part.encode())
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}:{t.requires_grad}".encode())
    return h.hexdigest()


class ExportCache:
    """Captured graphs in `directory`, one pickle per key, written atomically."""

    def __init__(self, directory: str):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.trainrt-capture")

    def load(self, key: str) -> CapturedGraph | None:
        path = self._path(key)
        if not os.path.exists(path):
            return None
        try:
            with open(path, "rb") as f:
                entry = pickle.load(f)
            if entry.get("format") != _FORMAT or entry.get("key") != key:
                raise ValueError("entry written by another version")
            fields = entry["fields"]
            fields["model"] = onnx.load_from_string(fields["model"])
            fields["in_spec"] = pytree.treespec_loads(fields["in_spec"])
            fields["out_spec"] = pytree.treespec_loads(fields["out_spec"])
            return CapturedGraph(**fields)
        except Exception as err:  # noqa: BLE001  (any unreadable entry is re-captured, never trusted)
            _log.warning("trainrt: export cache entry %s is unusable (%s: %s); capturing again", path,
                         type(err).__name__, err)
            os.remove(path)
            return None

    def store(self, key: str, captured: CapturedGraph) -> None:
        """Writes the entry atomically. A capture that cannot be stored (an output structure pytree
        cannot serialize, a full disk) is announced and the run goes on uncached."""
        tmp = None
        try:
            fields = dict(captured.__dict__)
            fields["model"] = captured.model.SerializeToString()
            fields["in_spec"] = pytree.treespec_dumps(captured.in_spec)
            fields["out_spec"] = pytree.treespec_dumps(captured.out_spec)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                pickle.dump({"format": _FORMAT, "key": key, "fields": fields}, f)
            os.replace(tmp, self._path(key))
        except Exception as err:  # noqa: BLE001  (caching is an optimization; the capture itself is good)
            logging.getLogger("trainrt").warning("trainrt export cache: not stored in %s (%s: %s); running uncached",
                                                 self.directory, type(err).__name__, err)
            if tmp and os.path.exists(tmp):
                os.remove(tmp)
