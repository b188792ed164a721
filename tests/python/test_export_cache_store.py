"""A capture the export cache cannot store is announced and the run goes on uncached."""

import collections

import torch
import torch.nn as nn

import trainrt

# A namedtuple of this test's own: torch's pytree flattens it, but its class is not a registered
# pytree type, so a cache entry could only name it and reading the entry would have to import it.
Pair = collections.namedtuple("Pair", "out doubled")


class ReturnsPair(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x):
        y = self.linear(x)
        return Pair(y, 2 * y)


def test_unstorable_capture_runs_uncached_and_says_so(monkeypatch, tmp_path, trainrt_log):
    monkeypatch.setenv("TRAINRT_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    plain = ReturnsPair()
    model = trainrt.RTModule(plain)
    x = torch.randn(4, 3)
    out = model(x)
    torch.testing.assert_close(tuple(out), tuple(plain(x)))
    assert type(out) is Pair and model._fallback_reason is None
    assert "not stored" in trainrt_log.text and "is not a type registered in torch's pytree" in trainrt_log.text
    assert not list(tmp_path.iterdir())  # no entry, no temporary file left behind
