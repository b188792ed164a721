"""Label sparsity (TRAINRT_ENABLE_SPARSE_OPTIMIZER, passes/label_sparsity.h) against eager.

Masked LM (BERT, RoBERTa) and causal LM with padding (GPT-2, Llama) from tiny configs: losses within
1e-4 relative and gradients within the HF tests' tolerance over 3 SGD-momentum steps, with the engine's
engine holding the sparse loss (a row selection, ValidRows, computed before the forward) and fallback
disabled. Also: the logits still come back
whole, a loss-only model whose LM head moves onto the valid rows, gradient rows of ignored labels
exactly zero, batches with no and with every label counted, NLL after log_softmax, and the option off.
"""

import copy

import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import trainrt
from trainrt.ortmodule import ORTModule

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def _programs(rt):
    return [e.programs for engines in rt._engines.values() for e in engines]


def _ops(graph_bytes) -> list[str]:
    return [n.op_type for n in onnx.load_from_string(graph_bytes).graph.node]


def _steps(model, batches):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, grads = [], []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        out = model(**batch)
        out.loss.backward()
        losses.append(float(out.loss.detach()))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        optimizer.step()
    return losses, grads, out


def _check_parity(model, batches, wrap=trainrt.RTModule):
    eager_losses, eager_grads, eager_out = _steps(copy.deepcopy(model), batches)
    rt = wrap(copy.deepcopy(model))
    rt_losses, rt_grads, rt_out = _steps(rt, batches)
    assert rt.fallback_reason is None
    assert [p.sparse_losses for p in _programs(rt)] == [1]
    assert any(name.endswith("/valid_rows") for name in _programs(rt)[0].row_selections)
    for e, r in zip(eager_losses, rt_losses):
        assert abs(e - r) <= 1e-4 * abs(e), (eager_losses, rt_losses)
    for step, (eg, rg) in enumerate(zip(eager_grads, rt_grads)):
        assert set(eg) == set(rg)
        for name in eg:
            if name.endswith("key.bias") or name.endswith("k_proj.bias"):
                continue  # its true gradient is exactly zero: rounding noise on both sides
            scale = eg[name].abs().max().item() + 1e-6
            assert (eg[name] - rg[name]).abs().max().item() <= 1e-4 * scale + 1e-6, (step, name)
    # The logits come back whole, as eager's: the sparse loss does not cut the output.
    torch.testing.assert_close(rt_out.logits, eager_out.logits, rtol=1e-4, atol=1e-4)


def _masked_batches(vocab, steps=3, batch=3, seq=16):
    out = []
    for s in range(steps):
        g = torch.Generator().manual_seed(s)
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        labels = ids.clone()
        labels[torch.rand(ids.shape, generator=g) >= 0.2] = -100
        labels[0, 0] = ids[0, 0]  # at least one counted label
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    return out


def _padded_batches(vocab, steps=3, batch=3, seq=16):
    out = []
    for s in range(steps):
        g = torch.Generator().manual_seed(s)
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        mask = torch.ones_like(ids)
        for b, keep in enumerate((seq, seq - 6, seq - 10)):
            mask[b, keep:] = 0
        labels = ids.masked_fill(mask == 0, -100)
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=96,
              max_position_embeddings=32)


@pytest.mark.parametrize("wrap", [trainrt.RTModule, ORTModule], ids=["RTModule", "ORTModule"])
def test_bert_masked_lm(wrap):
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**_SMALL, hidden_dropout_prob=0.0,
                                                                   attention_probs_dropout_prob=0.0))
    _check_parity(model, _masked_batches(96), wrap)


def test_roberta_masked_lm():
    torch.manual_seed(0)
    config = transformers.RobertaConfig(**{**_SMALL, "max_position_embeddings": 40}, hidden_dropout_prob=0.0,
                                        attention_probs_dropout_prob=0.0, pad_token_id=1)
    _check_parity(transformers.RobertaForMaskedLM(config), _masked_batches(96))


def test_gpt2_with_padding():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=96, n_positions=32, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    _check_parity(transformers.GPT2LMHeadModel(config), _padded_batches(96))


def test_llama_with_padding():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=2, vocab_size=96, max_position_embeddings=32, use_cache=False)
    _check_parity(transformers.LlamaForCausalLM(config), _padded_batches(96))


class _LossOnlyLM(nn.Module):
    """An LM head whose logits nothing else reads: the head itself moves onto the valid rows."""

    def __init__(self, vocab=50, dim=16, nll=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.transform = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.nll = nll

    def forward(self, ids, labels):
        h = self.norm(F.gelu(self.transform(self.embed(ids))))
        logits = self.head(h).view(-1, self.head.out_features)
        if self.nll:
            return F.nll_loss(F.log_softmax(logits, dim=-1), labels.view(-1))
        return F.cross_entropy(logits, labels.view(-1), ignore_index=-100)


def _loss_only_steps(model, batches):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    out = []
    for ids, labels in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = model(ids, labels)
        loss.backward()
        out.append((float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}))
        optimizer.step()
    return out


@pytest.mark.parametrize("nll", [False, True], ids=["cross_entropy", "nll_after_log_softmax"])
def test_loss_only_model_runs_its_head_on_the_valid_rows(nll):
    torch.manual_seed(0)
    model = _LossOnlyLM(nll=nll)
    batches = []
    for s in range(3):
        g = torch.Generator().manual_seed(s)
        ids = torch.randint(0, 50, (4, 12), generator=g)
        labels = ids.masked_fill(torch.rand(ids.shape, generator=g) > 0.3, -100)
        batches.append((ids, labels))
    rt = trainrt.RTModule(copy.deepcopy(model))
    for (le, ge), (lr, gr) in zip(_loss_only_steps(copy.deepcopy(model), batches), _loss_only_steps(rt, batches)):
        assert abs(le - lr) <= 1e-5 * abs(le)
        for name in ge:
            torch.testing.assert_close(gr[name], ge[name], rtol=1e-4, atol=1e-6)
    programs = _programs(rt)[0]
    rows = set(programs.row_selections)
    assert len(rows) == 1
    # The head's product reads the gathered rows: no product over all N rows is left in the forward.
    graph = onnx.load_from_string(programs.forward_graph_onnx()).graph
    producers = {o: n for n in graph.node for o in n.output}
    heads = [n for n in graph.node if n.op_type in ("FusedMatMul", "Gemm", "MatMul", "LinearSoftmaxCrossEntropy")
             and "head" in "".join(n.input)]
    assert heads and all(_reads_gathered_rows(n, producers, rows) for n in heads)


def _reads_gathered_rows(node, producers, rows) -> bool:
    """Whether the product's row input comes from a Gather of the selected rows (through row-wise ops)."""
    seen, stack = set(), [node.input[0]]
    while stack:
        v = stack.pop()
        if v in seen or v not in producers:
            continue
        seen.add(v)
        p = producers[v]
        if p.op_type == "Gather" and p.input[1] in rows:
            return True
        stack.extend(p.input[:1])
    return False


def test_gradient_rows_of_ignored_labels_are_exactly_zero():
    torch.manual_seed(0)
    head = nn.Linear(8, 20)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = head

        def forward(self, x, labels):
            return F.cross_entropy(self.head(x), labels, ignore_index=-100)

    x = torch.randn(70, 8, requires_grad=True)  # more rows than one multiple of 64
    labels = torch.randint(0, 20, (70,))
    labels[::3] = -100
    rt = trainrt.RTModule(Head())
    rt(x, labels).backward()
    assert _programs(rt)[0].sparse_losses == 1
    ignored = labels == -100
    assert torch.count_nonzero(x.grad[ignored]) == 0
    x_eager = x.detach().clone().requires_grad_()
    F.cross_entropy(head(x_eager), labels, ignore_index=-100).backward()
    torch.testing.assert_close(x.grad, x_eager.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("counted", ["none", "all"])
def test_batches_with_no_or_every_label_counted_match_eager(counted):
    torch.manual_seed(0)
    model = _LossOnlyLM()
    ids = torch.randint(0, 50, (2, 8))
    labels = torch.full_like(ids, -100) if counted == "none" else ids.clone()
    rt = trainrt.RTModule(copy.deepcopy(model))
    loss_rt = rt(ids, labels)
    loss_eager = model(ids, labels)
    if counted == "none":  # 0 / 0, as torch
        assert torch.isnan(loss_rt) and torch.isnan(loss_eager)
        return
    torch.testing.assert_close(loss_rt, loss_eager, rtol=1e-5, atol=1e-6)
    loss_rt.backward()
    loss_eager.backward()
    for (name, p), q in zip(rt.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_option_off_keeps_the_dense_loss(monkeypatch):
    monkeypatch.setenv("TRAINRT_ENABLE_SPARSE_OPTIMIZER", "0")
    rt = trainrt.RTModule(_LossOnlyLM())
    ids = torch.randint(0, 50, (2, 8))
    rt(ids, ids.masked_fill(ids > 25, -100)).backward()
    assert _programs(rt)[0].sparse_losses == 0
    assert _programs(rt)[0].row_selections == []


def test_ortmodule_alias(monkeypatch):
    monkeypatch.setenv("ORTMODULE_ENABLE_SPARSE_OPTIMIZER", "0")
    rt = ORTModule(_LossOnlyLM())
    ids = torch.randint(0, 50, (2, 8))
    rt(ids, ids.masked_fill(ids > 25, -100)).backward()
    assert _programs(rt)[0].sparse_losses == 0


def test_absent_logits_gradient_skips_its_backward_work():
    """The logits beside the loss get no gradient: the backward that runs has no Sum of a zero
    logits gradient into the loss's (passes/zero_input_elimination.h), unlike the one that takes it."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=96, n_positions=32, use_cache=False)
    model = transformers.GPT2LMHeadModel(config)
    batch = _padded_batches(96, steps=1)[0]
    rt = trainrt.RTModule(copy.deepcopy(model))
    rt(**batch).loss.backward()
    without = _ops(_programs(rt)[0].backward_graph_onnx())
    out = rt(**batch)
    (out.loss + out.logits.sum() * 0.0).backward()  # the logits' gradient given: the plain backward
    with_logits = _ops(_programs(rt)[0].backward_graph_onnx())
    assert without.count("Sum") < with_logits.count("Sum")


def test_bf16_head_runs_on_the_valid_rows():
    """Under bf16 the logits are bf16 and cast to f32 for the loss: the rows are gathered before the
    head all the same (the gather's gradient takes bf16), and the loss is eager autocast's."""
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**_SMALL, hidden_dropout_prob=0.0,
                                                                   attention_probs_dropout_prob=0.0))
    batch = _masked_batches(96, steps=1)[0]
    rt = trainrt.RTModule(copy.deepcopy(model), mixed_precision="bf16")
    loss = rt(**batch).loss
    loss.backward()
    loss = loss.detach()
    programs = _programs(rt)[0]
    assert rt.fallback_reason is None and programs.sparse_losses == 1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(**batch).loss.detach()
    assert abs(float(loss) - float(expected)) <= 2e-2 * abs(float(expected))
    graph = onnx.load_from_string(programs.forward_graph_onnx()).graph
    producers = {o: n for n in graph.node for o in n.output}
    rows = set(programs.row_selections)
    sce = [n for n in graph.node if n.op_type == "SoftmaxCrossEntropyLoss"]
    assert sce and all(_reads_gathered_rows(n, producers, rows) for n in sce)


def _bf16_loss_only_steps(model, batches, autocast):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    out = []
    for ids, labels in batches:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(ids, labels)
        loss.backward()
        out.append((float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}))
        optimizer.step()
    return out


def test_bf16_loss_only_head_is_one_fused_node_with_autocasts_losses_and_gradients():
    """A bf16 head whose logits nothing else reads: its product, loss and gradients run as one
    LinearSoftmaxCrossEntropy on bf16 operands, on the valid rows, over 3 SGD-momentum steps with eager
    autocast's losses and gradients within bf16's rounding."""
    torch.manual_seed(0)
    model = _LossOnlyLM(vocab=300, dim=32)
    batches = []
    for s in range(3):
        g = torch.Generator().manual_seed(s)
        ids = torch.randint(0, 300, (4, 24), generator=g)
        batches.append((ids, ids.masked_fill(torch.rand(ids.shape, generator=g) > 0.4, -100)))
    rt = trainrt.RTModule(copy.deepcopy(model), mixed_precision="bf16")
    got = _bf16_loss_only_steps(rt, batches, autocast=False)
    want = _bf16_loss_only_steps(copy.deepcopy(model), batches, autocast=True)
    assert rt.fallback_reason is None
    for step, ((le, ge), (lr, gr)) in enumerate(zip(want, got)):
        assert abs(le - lr) <= 5e-3 * abs(le), (step, le, lr)
        for name in ge:
            scale = ge[name].abs().max().item()
            assert (ge[name] - gr[name]).abs().max().item() <= 3e-2 * scale, (step, name)
    programs = _programs(rt)[0]
    graph = onnx.load_from_string(programs.forward_graph_onnx()).graph
    fused = [n for n in graph.node if n.op_type == "LinearSoftmaxCrossEntropy"]
    assert len(fused) == 1 and not any(n.op_type == "SoftmaxCrossEntropyLoss" for n in graph.node)
    types = {v.name: v.type.tensor_type.elem_type for v in list(graph.value_info) + list(graph.output)}
    assert types.get(fused[0].input[0]) == onnx.TensorProto.BFLOAT16
    producers = {o: n for n in graph.node for o in n.output}
    assert _reads_gathered_rows(fused[0], producers, set(programs.row_selections))


def _bf16_hf_steps(model, batches, autocast):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    out = []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(**batch).loss
        loss.backward()
        out.append((float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}))
        optimizer.step()
    return out


def test_bf16_gpt2_with_padding_scatters_no_cast_and_matches_autocast():
    """Under bf16 the head's gradient reaches its bf16 products through a Cast of the rows' scatter:
    the Cast moves onto the rows, so no Cast reads a scatter, and losses and gradients stay eager
    autocast's over 3 SGD-momentum steps."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=96, n_positions=32, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    model = transformers.GPT2LMHeadModel(config)
    batches = _padded_batches(96)
    rt = trainrt.RTModule(copy.deepcopy(model), mixed_precision="bf16")
    got = _bf16_hf_steps(rt, batches, autocast=False)
    want = _bf16_hf_steps(copy.deepcopy(model), batches, autocast=True)
    assert rt.fallback_reason is None and _programs(rt)[0].sparse_losses == 1
    for step, ((le, ge), (lr, gr)) in enumerate(zip(want, got)):
        assert abs(le - lr) <= 5e-3 * abs(le), (step, le, lr)
        for name in ge:
            scale = ge[name].abs().max().item()
            assert (ge[name] - gr[name]).abs().max().item() <= 3e-2 * scale + 1e-6, (step, name)
    backward = onnx.load_from_string(_programs(rt)[0].backward_graph_onnx()).graph
    producers = {o: n for n in backward.node for o in n.output}

    def scattered(value):
        p = producers.get(value)
        while p is not None and p.op_type in ("Reshape", "Flatten"):
            p = producers.get(p.input[0])
        return p is not None and p.op_type == "GatherGrad"

    casts = [n for n in backward.node if n.op_type == "Cast"]
    assert casts and not any(scattered(n.input[0]) for n in casts)
