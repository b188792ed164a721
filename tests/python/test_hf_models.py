"""Hugging Face transformers models train through RTModule as in eager PyTorch.

GPT2LMHeadModel, BertForMaskedLM and BertForSequenceClassification from tiny random configs (no
download), with SDPA and eager attention: same seed, init and data, 20 AdamW steps with padding
(attention_mask zeros, labels -100), dropout off; losses and final parameters agree with eager.
Batch and sequence length change across calls without a new capture (symbolic dims), and a run
with dropout on learns as eager does. Called without an attention_mask (and for GPT-2 without a
cache), transformers' mask code looks for packed sequences in the position ids (torch.diff,
cumsum): those models run in the engine too, in training, in eval mode and under no_grad. A capture plus 20 steps takes 10-25 s on the 2-core machine,
so the model x attention grid is marked slow; the quick run keeps one model per check.
"""

import copy

import pytest
import torch

import trainrt
from parity import assert_params_close

transformers = pytest.importorskip("transformers")

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

VOCAB = 100
MODELS = ["gpt2", "bert-mlm", "bert-cls"]
ATTENTION = ["sdpa", "eager"]


def make_model(kind: str, attn: str, dropout: float = 0.0) -> torch.nn.Module:
    """A 2-layer, width-32 model of `kind` in training mode, initialized from torch's seed."""
    from transformers import (BertConfig, BertForMaskedLM, BertForSequenceClassification, GPT2Config,
                              GPT2LMHeadModel)

    if kind == "gpt2":
        config = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=32, bos_token_id=0,
                            eos_token_id=0, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                            attn_implementation=attn)
        return GPT2LMHeadModel(config).train()
    config = BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                        vocab_size=VOCAB, max_position_embeddings=32, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout, num_labels=3, attn_implementation=attn)
    cls = BertForMaskedLM if kind == "bert-mlm" else BertForSequenceClassification
    return cls(config).train()


def make_batch(kind: str, batch: int, seq: int, seed: int = 0) -> dict:
    """Token ids with the last rows padded: attention_mask 0 and labels -100 there (MLM: a third of
    the tokens are labelled). Padding tokens are id 0, BERT's padding_idx."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    for row in range(1, batch):
        mask[row, seq - row * 2:] = 0
    ids[mask == 0] = 0
    if kind == "bert-cls":
        return dict(input_ids=ids, attention_mask=mask, labels=torch.randint(0, 3, (batch,), generator=g))
    labels = ids.clone()
    labels[mask == 0] = -100
    if kind == "bert-mlm":
        labels[torch.rand(batch, seq, generator=g) > 0.33] = -100
        labels[:, 0] = ids[:, 0]  # every row has a label
    return dict(input_ids=ids, attention_mask=mask, labels=labels)


def train_both(kind: str, attn: str, shapes, dropout: float = 0.0, lr: float = 1e-3, autocast: bool = False):
    """Trains eager and RTModule copies on the same batches; returns (eager losses, our losses,
    eager model, our RTModule)."""
    torch.manual_seed(0)
    eager = make_model(kind, attn, dropout)
    ours = trainrt.RTModule(copy.deepcopy(eager))
    opt_e = torch.optim.AdamW(eager.parameters(), lr=lr)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=lr)
    losses_e, losses_o = [], []
    for batch, seq in shapes:
        data = make_batch(kind, batch, seq, seed=seq)  # one batch per shape: repeated, it is learned
        for model, opt, losses in ((eager, opt_e, losses_e), (ours, opt_o, losses_o)):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(**data).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses_e, losses_o, eager, ours


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    """A model the engine cannot run fails the test instead of silently running in torch."""
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


@pytest.mark.slow
@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("kind", MODELS)
def test_training_with_padding_matches_eager(kind, attn):
    losses_e, losses_o, eager, ours = train_both(kind, attn, [(3, 12)] * 20)
    torch.testing.assert_close(torch.tensor(losses_o), torch.tensor(losses_e), rtol=1e-4, atol=0)
    assert losses_e[-1] < losses_e[0]
    assert_params_close(eager, ours, rtol=1e-3)
    assert ours.num_captures == 1


@pytest.mark.parametrize("kind", MODELS)
def test_training_under_autocast_matches_eager_autocast(kind):
    """bf16 autocast: the engine gives each op eager's dtype (BERT's logits come back bf16 and
    take a bf16 gradient), so 4 steps' losses agree to bf16 noise (measured <= 5e-5 relative)."""
    losses_e, losses_o, _, _ = train_both(kind, "sdpa", [(4, 16)] * 4, autocast=True)
    torch.testing.assert_close(torch.tensor(losses_o), torch.tensor(losses_e), rtol=1e-3, atol=0)


@pytest.mark.parametrize("kind", MODELS)
def test_every_op_gets_the_dtype_eager_autocast_gives_it(kind):
    """Under bf16 autocast each FX node's translated dtype is the one eager autocast gives it
    (BERT's post-LN blocks: the LayerNorm of a bf16 dense output + an f32 residual is f32, its
    dropout and GELU run in bf16, the logits are bf16)."""
    from test_mixed_precision import captured_dtypes, eager_autocast_dtypes
    from trainrt.capture.export import export_program

    torch.manual_seed(0)
    data = make_batch(kind, 4, 16)
    ep = export_program(make_model(kind, "sdpa"), (), data, "all")
    want, got = eager_autocast_dtypes(ep, (), data), captured_dtypes(ep, (), data)
    assert {name: got.get(name) for name in want} == want
    assert torch.bfloat16 in want.values()


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k == "bert-mlm" else k for k in MODELS])
def test_batch_and_sequence_length_changes_do_not_recapture(kind):
    shapes = [(3, 12), (2, 16), (4, 7), (3, 12), (2, 9)]
    losses_e, losses_o, eager, ours = train_both(kind, "sdpa", shapes)
    torch.testing.assert_close(torch.tensor(losses_o), torch.tensor(losses_e), rtol=1e-4, atol=0)
    assert_params_close(eager, ours, rtol=1e-3)
    assert ours.num_captures == 1


def test_outputs_keep_the_model_output_structure():
    """GPT-2's output is the same ModelOutput as eager: loss, logits and the DynamicCache of past
    keys and values (use_cache is on by default; the user passes nothing)."""
    torch.manual_seed(0)
    eager = make_model("gpt2", "sdpa")
    ours = trainrt.RTModule(copy.deepcopy(eager))
    data = make_batch("gpt2", 2, 8)
    want, got = eager(**data), ours(**data)
    assert type(got) is type(want) and list(got.keys()) == list(want.keys())
    assert type(got.past_key_values) is type(want.past_key_values)
    for layer_e, layer_o in zip(want.past_key_values.layers, got.past_key_values.layers):
        torch.testing.assert_close(layer_o.keys, layer_e.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(layer_o.values, layer_e.values, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-5)
    assert got.loss.requires_grad and got.logits.requires_grad


def test_encoder_decoder_cache_comes_back_as_in_eager():
    """mT5 returns an EncoderDecoderCache (its decoder's self- and cross-attention DynamicCaches):
    capture flattens it as a pytree node and the engine's outputs rebuild it (built as the
    coverage sweep builds it: tiny, from its own config)."""
    from transformers.cache_utils import EncoderDecoderCache

    from trainrt.coverage.architectures import Architecture
    from trainrt.coverage.run import build

    model, batches = build(Architecture("seq2seq", "mt5", "MT5ForConditionalGeneration"))
    ours = trainrt.RTModule(copy.deepcopy(model))
    data = batches(0)
    want, got = model(**data), ours(**data)
    assert type(got.past_key_values) is EncoderDecoderCache is type(want.past_key_values)
    for part in ("self_attention_cache", "cross_attention_cache"):
        for layer_e, layer_o in zip(getattr(want.past_key_values, part).layers,
                                    getattr(got.past_key_values, part).layers):
            torch.testing.assert_close(layer_o.keys, layer_e.keys, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(layer_o.values, layer_e.values, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-4, atol=0)


def test_padding_row_of_bert_embeddings_gets_no_gradient():
    """BERT's word embeddings have padding_idx=0: that row's gradient is zero in torch and in the
    engine (BertForSequenceClassification: no LM head tied to the embeddings feeds it)."""
    torch.manual_seed(0)
    eager = make_model("bert-cls", "sdpa")
    ours = trainrt.RTModule(copy.deepcopy(eager))
    data = make_batch("bert-cls", 3, 12)
    assert (data["input_ids"] == 0).any()
    eager(**data).loss.backward()
    ours(**data).loss.backward()
    grad_e = eager.bert.embeddings.word_embeddings.weight.grad
    grad_o = ours.bert.embeddings.word_embeddings.weight.grad
    assert torch.count_nonzero(grad_e[0]) == 0 and torch.count_nonzero(grad_o[0]) == 0
    assert torch.count_nonzero(grad_o[1:]) > 0
    torch.testing.assert_close(grad_o, grad_e, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_training_with_dropout_learns_like_eager():
    """Dropout masks differ between the engine and torch, so losses are compared as a trend: both
    fall, by comparable amounts, over 30 steps on one repeated batch."""
    losses_e, losses_o, _, ours = train_both("gpt2", "sdpa", [(4, 16)] * 30, dropout=0.1, lr=3e-3)
    drop_e = sum(losses_e[:5]) / 5 - sum(losses_e[-5:]) / 5
    drop_o = sum(losses_o[:5]) / 5 - sum(losses_o[-5:]) / 5
    assert drop_e > 0.5 and drop_o > 0.5
    assert 0.7 < drop_o / drop_e < 1.3, (losses_e, losses_o)
    assert abs(losses_o[0] - losses_e[0]) < 0.1 * losses_e[0]


def unmasked_batch(kind: str, batch: int, seq: int, extra: str) -> dict:
    """make_batch without attention_mask, plus the inputs `extra` names: 'nocache' (GPT-2's
    use_cache=False, the path through transformers' packed-sequence check), 'positions'
    (position_ids), 'types' (token_type_ids, BERT only)."""
    data = make_batch(kind, batch, seq, seed=seq)
    del data["attention_mask"]
    if "nocache" in extra:
        data["use_cache"] = False
    if "positions" in extra:
        data["position_ids"] = torch.arange(seq).expand(batch, seq)
    if "types" in extra:
        data["token_type_ids"] = torch.zeros(batch, seq, dtype=torch.long)
    return data


UNMASKED = [("gpt2", "nocache"), pytest.param("gpt2", "", marks=pytest.mark.slow),
            pytest.param("gpt2", "nocache positions", marks=pytest.mark.slow),
            pytest.param("bert-mlm", "positions types", marks=pytest.mark.slow),
            pytest.param("bert-cls", "", marks=pytest.mark.slow)]


@pytest.mark.parametrize("kind, extra", UNMASKED)
def test_training_without_attention_mask_runs_in_the_engine_as_eager(kind, extra):
    """Batch 1 and a new sequence length included; every step's loss and gradients equal eager's
    (AdamW steps in between), with no fallback (the fixture makes one an error)."""
    torch.manual_seed(0)
    eager = make_model(kind, "sdpa")
    ours = trainrt.RTModule(copy.deepcopy(eager))
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=1e-3)
    for batch, seq in [(3, 12), (1, 12), (2, 9), (3, 12)]:
        data = unmasked_batch(kind, batch, seq, extra)
        loss_e, loss_o = eager(**data).loss, ours(**data).loss
        opt_e.zero_grad()
        opt_o.zero_grad()
        loss_e.backward()
        loss_o.backward()
        assert ours.fallback_reason is None
        torch.testing.assert_close(loss_o, loss_e, rtol=1e-4, atol=0)
        for (name, pe), (_, po) in zip(eager.named_parameters(), ours.named_parameters()):
            torch.testing.assert_close(po.grad, pe.grad, rtol=1e-3, atol=1e-5, msg=f"{name} at {(batch, seq)}")
        opt_e.step()
        opt_o.step()


@pytest.mark.parametrize("kind", ["gpt2", pytest.param("bert-cls", marks=pytest.mark.slow)])
def test_eval_mode_and_no_grad_without_attention_mask_run_the_forward_in_the_engine(kind):
    """In eval mode the outputs equal eager's and backward still works; under no_grad only the
    forward program runs (outputs without a graph to torch)."""
    torch.manual_seed(0)
    eager = make_model(kind, "sdpa").eval()
    ours = trainrt.RTModule(copy.deepcopy(eager)).eval()
    data = unmasked_batch(kind, 2, 10, "nocache" if kind == "gpt2" else "")
    want, got = eager(**data), ours(**data)
    assert ours.fallback_reason is None
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-5)
    got.loss.backward()
    want.loss.backward()
    grads = [(p.grad, q.grad) for p, q in zip(eager.parameters(), ours.parameters())]
    assert all(o is not None for _, o in grads)
    for e, o in grads:
        torch.testing.assert_close(o, e, rtol=1e-3, atol=1e-5)
    with torch.no_grad():
        want, got = eager(**data), ours(**data)
    assert ours.fallback_reason is None
    assert not got.loss.requires_grad and not got.logits.requires_grad
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-4, atol=0)
