"""The export cache holds data only and trusts nothing it did not write.

A pickle planted under an entry's name runs no code; a tampered or foreign entry is announced,
captured again and rewritten; a directory others can write to is refused unless
TRAINRT_CACHE_ALLOW_SHARED=1; a second process hits the cache without calling torch.export, for a
tiny GPT-2 and BERT (slow: importing transformers and capturing take ~10 s per process), a CNN and
an LSTM, and trains as eager does. A graph calling an autograd.Function (PythonOp) is not stored.
"""

import copy
import hashlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import trainrt
from trainrt import shared_captures
from trainrt.export_cache import ExportCache


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, x):
        y = self.net(x)
        return {"logits": y, "pair": (y.sum(), [y.mean()])}  # a dict, a tuple, a list


@pytest.fixture
def counted(monkeypatch):
    """How many times capture and torch.export ran (a cache hit runs neither)."""
    calls = {"capture": 0, "export": 0}
    real_capture, real_export = trainrt.capture.capture, torch.export.export

    def capture(*a, **k):
        calls["capture"] += 1
        return real_capture(*a, **k)

    def export(*a, **k):
        calls["export"] += 1
        return real_export(*a, **k)

    monkeypatch.setattr("trainrt.capture.capture", capture)
    monkeypatch.setattr(torch.export, "export", export)
    return calls


def run(model: nn.Module) -> torch.Tensor:
    """One forward through a fresh RTModule of a copy of `model` (reads the cache from scratch)."""
    torch.manual_seed(1)
    out = trainrt.RTModule(copy.deepcopy(model))(torch.randn(4, 6))
    return out["logits"]


@pytest.fixture
def cache_dir(monkeypatch, tmp_path):
    directory = tmp_path / "cache"
    monkeypatch.setenv("TRAINRT_CACHE_DIR", str(directory))
    monkeypatch.delenv("TRAINRT_CACHE_ALLOW_SHARED", raising=False)
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    # Each RTModule reads the disk as a new process would, not the captures shared in this one.
    monkeypatch.setattr(shared_captures, "find", lambda key, shapes, exclude=(): None)
    return directory


def the_entry(directory: Path) -> Path:
    entries = list(directory.glob("*.trainrt-capture"))
    assert len(entries) == 1, entries
    return entries[0]


def test_a_second_instance_hits_without_torch_export(cache_dir, counted):
    torch.manual_seed(0)
    model = MLP()
    expected = run(model)
    assert counted == {"capture": 1, "export": 1}
    assert (cache_dir.stat().st_mode & 0o777) == 0o700  # created private
    assert (the_entry(cache_dir).stat().st_mode & 0o777) == 0o600
    assert the_entry(cache_dir).read_bytes().startswith(b"TRAINRT-EXPORT-CACHE ")
    torch.testing.assert_close(run(model), expected)
    assert counted == {"capture": 1, "export": 1}


class _Planted:
    """A pickle payload: unpickling it creates `marker` (what an attacker's code would do)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_planted_pickle_runs_no_code_and_is_replaced(cache_dir, counted, tmp_path, trainrt_log):
    torch.manual_seed(0)
    model = MLP()
    expected = run(model)
    entry, marker = the_entry(cache_dir), tmp_path / "pwned"
    planted = pickle.dumps({"format": 3, "key": entry.stem, "fields": _Planted(str(marker))})
    entry.write_bytes(planted)
    torch.testing.assert_close(run(model), expected)
    assert not marker.exists()  # never unpickled
    assert counted["capture"] == 2 and "not a TrainRT export cache entry" in trainrt_log.text
    run(model)
    assert counted["capture"] == 2  # the rewritten entry serves the next instance
    # The same pickle behind a valid magic line and checksum: the payload must be JSON, so still no code runs.
    magic = trainrt.export_cache._MAGIC
    entry.write_bytes(magic + hashlib.sha256(planted).hexdigest().encode() + b"\n" + planted)
    torch.testing.assert_close(run(model), expected)
    assert not marker.exists() and counted["capture"] == 3 and trainrt_log.text.count("is unusable") == 2
    pickle.loads(planted)
    assert marker.exists()  # the payload was live: loading it as the old cache did would have run it


def test_a_tampered_entry_is_announced_recaptured_and_rewritten(cache_dir, counted, trainrt_log):
    torch.manual_seed(0)
    model = MLP()
    expected = run(model)
    entry = the_entry(cache_dir)
    good = entry.read_bytes()
    tampered = bytearray(good)
    tampered[-10] ^= 0xFF  # inside the ONNX bytes: same size, checksum no longer matches
    entry.write_bytes(bytes(tampered))
    torch.testing.assert_close(run(model), expected)
    assert counted["capture"] == 2 and "checksum mismatch" in trainrt_log.text
    assert entry.read_bytes() == good
    run(model)
    assert counted["capture"] == 2


def test_size_text_that_is_code_is_refused_not_run(cache_dir, counted, tmp_path, trainrt_log):
    """Shape guards and compound dims are evaluated when shapes change: an entry whose writer put code
    there (behind a valid checksum) is refused at load, before anything evaluates it."""
    from trainrt.export_cache import _decode, _encode

    torch.manual_seed(0)
    model = MLP()
    expected = run(model)
    entry, marker = the_entry(cache_dir), tmp_path / "pwned"
    captured = _decode(entry.read_bytes(), entry.stem)
    for field, value in (("guards", [f"open({str(marker)!r}, 'w') is None"]),
                         ("input_dims", [(f"__import__('os').system('touch {marker}')", 8)])):
        planted = copy.copy(captured)
        setattr(planted, field, value)
        entry.write_bytes(_encode(entry.stem, planted))
        torch.testing.assert_close(run(model), expected)
        assert not marker.exists() and "not size arithmetic" in trainrt_log.text
    assert counted["capture"] == 3  # each planted entry captured again and rewritten


def test_an_entry_under_another_name_or_behind_a_symlink_is_not_used(cache_dir, tmp_path, trainrt_log):
    torch.manual_seed(0)
    run(MLP())
    entry = the_entry(cache_dir)
    cache = ExportCache(str(cache_dir))
    assert cache.load(entry.stem) is not None
    other_key = "0" * 64
    (cache_dir / f"{other_key}.trainrt-capture").write_bytes(entry.read_bytes())
    assert cache.load(other_key) is None and "written for another key" in trainrt_log.text
    elsewhere = tmp_path / "elsewhere"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    assert cache.load(entry.stem) is None and "cannot open it" in trainrt_log.text


def test_an_entry_others_can_write_is_refused_and_rewritten(cache_dir, counted, trainrt_log):
    torch.manual_seed(0)
    model = MLP()
    run(model)
    entry = the_entry(cache_dir)
    entry.chmod(0o666)
    run(model)
    assert counted["capture"] == 2 and "writable by group and others (mode 0666)" in trainrt_log.text
    assert (entry.stat().st_mode & 0o777) == 0o600
    run(model)
    assert counted["capture"] == 2


def test_a_world_writable_directory_is_refused_unless_allowed(cache_dir, counted, monkeypatch, trainrt_log):
    cache_dir.mkdir(mode=0o700)
    cache_dir.chmod(0o777)
    torch.manual_seed(0)
    model = MLP()
    run(model)
    run(model)
    assert counted["capture"] == 2 and not list(cache_dir.iterdir())
    assert "writable by group and others (mode 0777)" in trainrt_log.text
    assert "TRAINRT_CACHE_ALLOW_SHARED=1" in trainrt_log.text
    monkeypatch.setenv("TRAINRT_CACHE_ALLOW_SHARED", "1")
    run(model)
    run(model)
    assert counted["capture"] == 3 and len(list(cache_dir.iterdir())) == 1


def test_a_sticky_world_writable_directory_of_ours_is_used(cache_dir, counted):
    """Like /tmp: others may add files but not replace ours, and what they add is not ours."""
    cache_dir.mkdir(mode=0o700)
    cache_dir.chmod(0o1777)
    torch.manual_seed(0)
    model = MLP()
    run(model)
    run(model)
    assert counted["capture"] == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_entry_or_directory_of_another_user_is_refused(cache_dir, counted, trainrt_log):
    torch.manual_seed(0)
    model = MLP()
    run(model)
    entry = the_entry(cache_dir)
    os.chown(entry, 12345, -1)
    run(model)
    assert counted["capture"] == 2 and "belongs to uid 12345" in trainrt_log.text
    assert entry.stat().st_uid == os.geteuid()  # rewritten
    os.chown(cache_dir, 12345, -1)
    run(model)
    assert counted["capture"] == 3 and "not using" in trainrt_log.text


CHILD = Path(__file__).with_name("export_cache_child.py")


def run_child(model: str, cache: Path) -> dict:
    env = dict(os.environ, TRAINRT_CACHE_DIR=str(cache), TRAINRT_LOG_LEVEL="INFO",
               TRAINRT_FALLBACK_POLICY="FALLBACK_DISABLE")
    done = subprocess.run([sys.executable, str(CHILD), model], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model", [pytest.param("gpt2", marks=pytest.mark.slow),
                                   pytest.param("bert", marks=pytest.mark.slow), "cnn", "lstm"])
def test_a_second_process_hits_the_cache(model, tmp_path):
    first = run_child(model, tmp_path)
    assert first["exports"] >= 1 and any("stored" in m for m in first["cache_log"]), first["cache_log"]
    second = run_child(model, tmp_path)
    assert second["exports"] == 0 and any("hit" in m for m in second["cache_log"]), second["cache_log"]
    for result in (first, second):
        assert result["fallback"] is None and result["structure"] == result["eager_structure"]
        assert result["loss"] == pytest.approx(result["eager_loss"], rel=1e-5, abs=1e-6)
        assert result["grads"].keys() == result["eager_grads"].keys()
        for name, grad in result["grads"].items():
            torch.testing.assert_close(torch.tensor(grad), torch.tensor(result["eager_grads"][name]),
                                       rtol=1e-4, atol=1e-5, msg=name)
    assert second["loss"] == first["loss"]
    if model == "gpt2":  # the past_key_values leave the engine and come back as a DynamicCache
        assert "CausalLMOutputWithCrossAttentions" in second["structure"] and "DynamicCache" in second["structure"]


def test_a_graph_with_a_python_op_is_not_stored(tmp_path, trainrt_log):
    """A PythonOp node (a user's autograd.Function kept opaque) names its Function by a call id into
    the capturing process's registry: another process would call nothing, or another Function."""
    import onnx

    from trainrt.capture import CapturedGraph

    call = onnx.helper.make_node("PythonOp", ["x"], ["ctx", "y"], domain="com.trainrt", function="mod.Square", call_id=0)
    body = onnx.helper.make_graph([call], "body", [], [])
    loop = onnx.helper.make_node("Loop", ["n", "c"], [], body=body)  # inside a subgraph too
    for nodes in ([call], [loop]):
        graph = onnx.helper.make_graph(nodes, "g", [], [])
        captured = CapturedGraph(model=onnx.helper.make_model(graph), param_inputs=[], buffer_inputs=[],
                                 user_inputs=["x"], in_spec=torch.utils._pytree.tree_flatten(((1,), {}))[1],
                                 non_tensor_inputs=[], outputs=["y"], out_spec=torch.utils._pytree.treespec_leaf(),
                                 differentiable_outputs=[True], buffer_mutations=[], input_dims=[(2,)], dim_ranges={},
                                 recompute_regions={})
        ExportCache(str(tmp_path)).store("0" * 64, captured)
    assert not list(tmp_path.iterdir())
    assert "calls autograd.Function mod.Square through PythonOp" in trainrt_log.text


class _Heads(nn.Module):
    """Equal parameter shapes and equal repr for any `heads`: only the plain attribute tells them apart."""

    def __init__(self, heads: int):
        super().__init__()
        self.heads = heads
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        b, t, c = x.shape
        y = self.proj(x).view(b, t, self.heads, c // self.heads)
        return (y * y.softmax(-1)).reshape(b, t, c)


def test_a_plain_attribute_changes_the_disk_key(cache_dir, monkeypatch):
    """A model that differs only in its head count must not read another's entry: the key holds the
    modules' plain attributes (before, two such processes shared one entry and one got a wrong graph)."""
    from trainrt.export_cache import cache_key

    assert repr(_Heads(2)) == repr(_Heads(4))
    assert cache_key(_Heads(2), "schema") != cache_key(_Heads(4), "schema")
    assert cache_key(_Heads(2), "schema") == cache_key(_Heads(2), "schema")
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    x = torch.randn(2, 3, 8)
    for heads in (2, 4):
        shared_captures._captures.clear()  # the disk alone
        torch.manual_seed(0)
        eager = _Heads(heads)
        model = trainrt.RTModule(copy.deepcopy(eager))
        assert torch.allclose(model(x), eager(x), atol=1e-6), heads
        assert model.fallback_reason is None
