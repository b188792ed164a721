"""RTModule against PyTorch eager: same seed, init and data, 20 AdamW steps, losses and parameters agree."""

import copy

import pytest
import torch
import torch.nn as nn

import trainrt
from trainrt.bench.models import Block
from parity import assert_parity, train_both


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 5))

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.net(x), y)


class TinyGPT(nn.Module):
    """Token + position embedding, the benchmark's GPT blocks (LayerNorm, causal attention via
    matmul/softmax with a mask, GELU MLP, residuals), tied output weights, cross-entropy loss."""

    def __init__(self, vocab=40, dim=32, heads=4, seq=12, layers=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        # qkv has no bias: the key bias gets an exactly-zero gradient (softmax is invariant to it), and
        # AdamW turns the rounding noise of a zero gradient into +-lr steps that no two
        # implementations share (torch against itself with other thread counts included).
        self.blocks = nn.ModuleList(Block(dim, heads, qkv_bias=False) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).bool())

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x, self.mask[:T, :T])
        logits = self.head(self.ln_f(x))
        return nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def test_mlp_matches_eager_for_20_adamw_steps():
    def batches(step):
        g = torch.Generator().manual_seed(step)
        return torch.randn(16 + step % 3, 20, generator=g), torch.randint(0, 5, (16 + step % 3,), generator=g)

    assert_parity(*train_both(MLP, batches), param_rtol=1e-4)


def test_gpt_matches_eager_for_20_adamw_steps_with_changing_batch():
    def batches(step):
        g = torch.Generator().manual_seed(step)
        b = 2 + step % 2
        return torch.randint(0, 40, (b, 12), generator=g), torch.randint(0, 40, (b, 12), generator=g)

    assert_parity(*train_both(TinyGPT, batches), param_rtol=1e-4)


def test_wrapper_behaves_as_the_module():
    torch.manual_seed(0)
    plain = MLP()
    model = trainrt.RTModule(copy.deepcopy(plain))
    assert list(model.state_dict()) == list(plain.state_dict())
    plain.load_state_dict(model.state_dict())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in plain.named_parameters()]
    assert model.net[0].in_features == 20
    model.eval()
    assert not model._module.training
    with torch.no_grad():
        x, y = torch.randn(4, 20), torch.randint(0, 5, (4,))
        torch.testing.assert_close(model(x, y), plain.eval()(x, y))


def test_a_module_holding_an_rtmodule_loads_its_own_state_dict():
    """state_dict() names the wrapped module's entries without RTModule's `_module`; the parent's
    load_state_dict takes them under those names."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(trainrt.RTModule(MLP()))
    state = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    assert all("_module" not in k for k in state)
    model.load_state_dict(state)
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k


def test_backward_refuses_an_input_whose_memory_was_freed_since_the_forward():
    """The engine's backward reads its inputs where they were at the forward; a storage resized to 0
    in between (what FSDP2 does to a parameter it reshards) raises rather than reading freed memory."""
    model = trainrt.RTModule(torch.nn.Linear(4, 3))
    loss = model(torch.randn(2, 4, requires_grad=True)).square().sum()  # its input's gradient reads the weight
    model.weight.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match="reads weight in place, and its memory was freed or moved"):
        loss.backward()


def test_unsupported_op_falls_back_and_says_so(trainrt_log):
    class Odd(nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x).sum()

    model = trainrt.RTModule(Odd())
    x = torch.randn(3)
    out = model(x)
    assert "falling back to PyTorch" in trainrt_log.text and "bessel_j0" in trainrt_log.text
    assert "bessel_j0" in model.fallback_reason
    torch.testing.assert_close(out, torch.special.bessel_j0(x).sum())


def test_fallback_disabled_raises_naming_the_op(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")

    class Odd(nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x).sum()

    with pytest.raises(RuntimeError, match="bessel_j0"):
        trainrt.RTModule(Odd())(torch.randn(3))


def test_ortmodule_import_path_works():
    from trainrt.ortmodule import DebugOptions, LogLevel, ORTModule

    model = ORTModule(MLP(), DebugOptions(log_level=LogLevel.INFO))
    assert isinstance(model, trainrt.RTModule)


def test_batch_and_sequence_length_changes_do_not_recapture():
    """Batch and sequence length are symbolic: position ids (arange(T)), the causal mask slice and
    the views all follow the run's sizes. (A first call at T = 12, the mask buffer's size, would
    capture T static: torch.export specializes a slice that ends at the size of what it slices.)"""
    torch.manual_seed(0)
    model = trainrt.RTModule(TinyGPT())
    for b, t in [(2, 8), (3, 10), (2, 11), (5, 3), (4, 8)]:
        idx = torch.randint(0, 40, (b, t))
        loss = model(idx, idx)
        loss.backward()
        torch.testing.assert_close(loss, model._module(idx, idx), rtol=1e-5, atol=1e-6)
    assert model.num_captures == 1
    (dims,) = {tuple(d) for d in model.engines[0].captured.input_dims}
    assert all(isinstance(d, str) for d in dims)
    # T = 12 is the one length the trace's branches exclude: export's slice of the 12-row mask buffer
    # guarded `T != 12` (capture/shape_guards.py). It is captured once more; then both serve.
    assert model.engines[0].captured.guards == [f"{dims[1]} != 12"]
    for b, t in [(3, 12), (2, 9), (4, 12)]:
        idx = torch.randint(0, 40, (b, t))
        torch.testing.assert_close(model(idx, idx), model._module(idx, idx), rtol=1e-5, atol=1e-6)
    assert model.num_captures == 2


def test_a_batch_of_one_is_captured_again_and_says_why(trainrt_log):
    """torch.export specializes sizes 0 and 1, so a capture made at batch 4 covers 2 and up; batch 1
    is captured once more (a model may branch on a size of 1, so the graph of 4 cannot be trusted
    there), and the first such capture says why at WARNING. Both give eager's loss."""
    torch.manual_seed(0)
    model = trainrt.RTModule(TinyGPT())
    for b in (4, 1, 3, 1):
        idx = torch.randint(0, 40, (b, 8))
        torch.testing.assert_close(model(idx, idx), model._module(idx, idx), rtol=1e-5, atol=1e-6)
    assert model.num_captures == 2 and model.fallback_reason is None
    said = [r.getMessage() for r in trainrt_log.records if "captured again" in r.getMessage()]
    assert said == ["trainrt: TinyGPT is captured again for input shapes [(1, 8), (1, 8)]: input 0 dim 0 is 1; "
                    "the capture covers 2 to any size (torch.export specializes sizes 0 and 1)"], said


def test_dropout_is_reproducible_under_manual_seed_and_drops_p():
    class Drop(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(64, 64)

        def forward(self, x):
            return nn.functional.dropout(self.lin(x), p=0.25, training=self.training)

    torch.manual_seed(0)
    model = trainrt.RTModule(Drop())
    x = torch.randn(128, 64)
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(1)
    b = model(x)
    torch.testing.assert_close(a, b)
    dropped = (a == 0).float().mean().item()
    assert abs(dropped - 0.25) < 0.02
    a.sum().backward()
    assert model._module.lin.weight.grad is not None


def test_save_onnx_writes_valid_graphs_and_torch_save_works(tmp_path):
    import onnx

    torch.manual_seed(0)
    model = trainrt.RTModule(MLP(), trainrt.DebugOptions(save_onnx=True, onnx_prefix="mlp", save_path=str(tmp_path)))
    model(torch.randn(4, 20), torch.randint(0, 5, (4,))).backward()
    for kind in ("forward", "training", "optimized_forward", "optimized_backward"):
        onnx.checker.check_model(onnx.load(str(tmp_path / f"mlp_{kind}.onnx")))
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    x, y = torch.randn(3, 20), torch.randint(0, 5, (3,))
    torch.testing.assert_close(loaded(x, y), model(x, y))


def test_environment_overrides_code_and_trainrt_names_win_over_ortmodule(monkeypatch, tmp_path):
    monkeypatch.setenv("ORTMODULE_LOG_LEVEL", "ERROR")
    assert trainrt.DebugOptions(log_level=trainrt.LogLevel.INFO).log_level == trainrt.LogLevel.ERROR
    monkeypatch.setenv("TRAINRT_LOG_LEVEL", "VERBOSE")
    assert trainrt.DebugOptions(log_level=trainrt.LogLevel.INFO).log_level == trainrt.LogLevel.VERBOSE
    monkeypatch.setenv("TRAINRT_SAVE_ONNX_PATH", str(tmp_path))
    options = trainrt.DebugOptions()
    assert options.save_onnx and options.save_path == str(tmp_path)
    with pytest.raises(ValueError, match="LOUD"):
        monkeypatch.setenv("TRAINRT_LOG_LEVEL", "LOUD")
        trainrt.DebugOptions()


def test_export_cache_reuses_captures_across_instances_and_recovers_from_corruption(monkeypatch, tmp_path):
    monkeypatch.setenv("TRAINRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(trainrt.shared_captures, "find", lambda key, shapes, exclude=(): None)  # the disk's path only
    calls = []
    real_capture = __import__("trainrt.capture", fromlist=["capture"]).capture
    monkeypatch.setattr("trainrt.capture.capture", lambda *a, **k: calls.append(1) or real_capture(*a, **k))
    x, y = torch.randn(4, 20), torch.randint(0, 5, (4,))
    torch.manual_seed(0)
    first = trainrt.RTModule(MLP())
    expected = first(x, y)
    assert len(calls) == 1 and len(list(tmp_path.glob("*.trainrt-capture"))) == 1
    second = trainrt.RTModule(copy.deepcopy(first._module))
    torch.testing.assert_close(second(x, y), expected)
    assert len(calls) == 1  # served from the cache
    entry = next(tmp_path.glob("*.trainrt-capture"))
    entry.write_bytes(entry.read_bytes()[:50])  # truncated
    third = trainrt.RTModule(copy.deepcopy(first._module))
    torch.testing.assert_close(third(x, y), expected)
    assert len(calls) == 2  # detected and captured again
    other = trainrt.RTModule(nn.Sequential(nn.Linear(20, 5)))  # another structure: its own entry
    other(x)
    assert len(calls) == 3


def test_detach_stops_gradients_like_torch():
    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 1)

        def forward(self, x):
            h = self.a(x)
            return (self.b(h) * h.detach().sum()).sum() + self.b(h.detach()).sum()

    torch.manual_seed(0)
    eager = Detached()
    ours = trainrt.RTModule(copy.deepcopy(eager))
    x = torch.randn(3, 4)
    eager(x).backward()
    ours(x).backward()
    assert ours._fallback_reason is None
    for (name, pe), (_, po) in zip(eager.named_parameters(), ours._module.named_parameters()):
        torch.testing.assert_close(po.grad, pe.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_replaced_or_converted_parameters_are_read_after_the_parameter_cache_was_filled():
    """RTModule looks parameters up by name only when one was replaced or given new storage; each
    kind of change must still reach the engine: assignment, load_state_dict(assign=True), .half(), and
    a conversion to a dtype the engine does not take falls back."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    model = trainrt.RTModule(copy.deepcopy(eager))
    x = torch.randn(5, 4)

    def check():
        for m in (eager, model):
            m.zero_grad(set_to_none=True)
        ref, out = eager(x), model(x)
        torch.testing.assert_close(out, ref)
        ref.sum().backward()
        out.sum().backward()
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, msg=name)

    check()
    check()
    new_weight = torch.randn(2, 3)
    eager[2].weight = nn.Parameter(new_weight.clone())
    model._module[2].weight = nn.Parameter(new_weight.clone())
    check()
    state = {k: torch.randn_like(v) for k, v in eager.state_dict().items()}
    eager.load_state_dict(state, assign=True)
    model.load_state_dict({k: v.clone() for k, v in state.items()}, assign=True)
    check()
    with torch.no_grad():  # in place, same storage: seen without a look-up
        eager[0].bias.add_(1.0)
        model._module[0].bias.add_(1.0)
    check()
    model.half()  # new storage of another dtype: captured again, in f16
    eager.half()
    out = model(x.half())
    assert out.dtype == torch.float16 and model._fallback_reason is None
    torch.testing.assert_close(out, eager(x.half()), rtol=1e-2, atol=1e-2)
    model.to(torch.complex64)  # a dtype the engine does not take: falls back, announced
    assert model(x.to(torch.complex64)).dtype == torch.complex64
    assert "complex64" in model._fallback_reason
