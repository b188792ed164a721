"""A capture the export cache cannot store is announced and the run goes on uncached."""

import torch
import torch.nn as nn

import trainrt
import trainrt.export_cache


def test_unstorable_capture_runs_uncached_and_says_so(monkeypatch, tmp_path, trainrt_log):
    def refuse(spec):
        raise TypeError("this output structure cannot be serialized")

    monkeypatch.setenv("TRAINRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(trainrt.export_cache.pytree, "treespec_dumps", refuse)
    torch.manual_seed(0)
    plain = nn.Linear(3, 2)
    model = trainrt.RTModule(plain)
    x = torch.randn(4, 3)
    torch.testing.assert_close(model(x), plain(x))
    assert model._fallback_reason is None
    assert "not stored" in trainrt_log.text and "cannot be serialized" in trainrt_log.text
    assert not list(tmp_path.iterdir())  # no entry, no temporary file left behind
