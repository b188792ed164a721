"""Padding elimination (TRAINRT_ENABLE_EMBEDDING_SPARSE_OPTIMIZER, passes/padding_elimination.h) against eager.

Causal LM with right and left padding (GPT-2, Llama) and masked LM with padding (BERT, RoBERTa) from
tiny configs, fallback disabled, 3 SGD-momentum steps: losses within 1e-4 relative, gradients within
1e-4 of each tensor's largest element, logits equal to eager's at every position a token is kept,
and exactly zero where one was dropped (the padding no loss counts). Also: models where dropping the
padding would change a result are left whole, and say why; the option off and its ORTModule alias.
"""

import copy

import onnx
import pytest
import torch
import torch.nn as nn

import trainrt

transformers = pytest.importorskip("transformers")

_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=96,
              max_position_embeddings=32)


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    monkeypatch.setenv("TRAINRT_ENABLE_EMBEDDING_SPARSE_OPTIMIZER", "1")


def _programs(rt):
    return [e.programs for engines in rt._engines.values() for e in engines]


def _batches(vocab, side, masked_lm=False, steps=3, seq=16):
    """Three rows: none, 6 and 10 tokens of padding on `side`; labels -100 on the padding (and, for a
    masked LM, on 70% of the rest)."""
    out = []
    for s in range(steps):
        g = torch.Generator().manual_seed(s)
        ids = torch.randint(2, vocab, (3, seq), generator=g)
        mask = torch.ones_like(ids)
        for b, pad in enumerate((0, 6, 10)):
            if pad and side == "left":
                mask[b, :pad] = 0
            elif pad:
                mask[b, seq - pad:] = 0
        labels = ids.masked_fill(mask == 0, -100)
        if masked_lm:
            labels[torch.rand(ids.shape, generator=g) >= 0.3] = -100
            labels[0, 0] = ids[0, 0]
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


def _steps(model, batches):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    results = []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        out = model(**batch)
        out.loss.backward()
        results.append((float(out.loss.detach()), out.logits.detach().clone(),
                        {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
        optimizer.step()
    return results


def _counted_rows(batch, causal):
    """(B, S) bool: positions whose logits a counted label reads (a causal LM's loss shifts by one)."""
    labels = batch["labels"]
    if causal:
        labels = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
    return labels != -100


def _check(model, batches, causal):
    eager = _steps(copy.deepcopy(model), batches)
    rt = trainrt.RTModule(copy.deepcopy(model))
    ours = _steps(rt, batches)
    assert rt.fallback_reason is None
    reasons = [p.padding_elimination for p in _programs(rt)]
    assert reasons and all(r.endswith("ops on the kept tokens") for r in reasons), reasons
    for batch, (e_loss, e_logits, e_grads), (loss, logits, grads) in zip(batches, eager, ours):
        assert abs(e_loss - loss) <= 1e-4 * abs(e_loss), (e_loss, loss)
        kept = batch["attention_mask"].bool() | _counted_rows(batch, causal)
        torch.testing.assert_close(logits[kept], e_logits[kept], rtol=1e-4, atol=1e-5)
        assert torch.count_nonzero(logits[~kept]) == 0
        assert set(grads) == set(e_grads)
        for name, g in e_grads.items():
            if name.endswith(("key.bias", "k_proj.bias")):
                continue  # its true gradient is exactly zero: rounding noise on both sides
            scale = g.abs().max().item() + 1e-6
            assert (g - grads[name]).abs().max().item() <= 1e-4 * scale + 1e-6, name
    return rt


@pytest.mark.parametrize("side", ["right", "left"])
def test_gpt2(side):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=96, n_positions=32, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    rt = _check(transformers.GPT2LMHeadModel(config), _batches(96, side), causal=True)
    # The kept rows run the layers: the forward gathers the tokens once and scatters back at attention.
    programs = _programs(rt)[0]
    assert any(name.endswith("/kept_tokens/rows") for name in programs.row_selections)
    forward = onnx.load_from_string(programs.forward_graph_onnx()).graph
    assert sum(n.op_type == "GatherGrad" for n in forward.node) >= 2  # attention's input in each layer


@pytest.mark.parametrize("side", ["right", "left"])
def test_llama(side):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=1, vocab_size=96, max_position_embeddings=32,
                                      use_cache=False, pad_token_id=0)
    _check(transformers.LlamaForCausalLM(config), _batches(96, side), causal=True)


def test_bert_masked_lm():
    torch.manual_seed(0)
    config = transformers.BertConfig(**_SMALL, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    _check(transformers.BertForMaskedLM(config), _batches(96, "right", masked_lm=True), causal=False)


def test_roberta_masked_lm():
    torch.manual_seed(0)
    config = transformers.RobertaConfig(**{**_SMALL, "max_position_embeddings": 40}, hidden_dropout_prob=0.0,
                                        attention_probs_dropout_prob=0.0, pad_token_id=1)
    _check(transformers.RobertaForMaskedLM(config), _batches(96, "right", masked_lm=True), causal=False)


class _MeanPooled(nn.Module):
    """Embeddings, a projection, masked attention, then a mean over the sequence: the mean would read
    the dropped rows."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, ids, attention_mask):
        h = self.proj(self.embed(ids))
        a = torch.nn.functional.scaled_dot_product_attention(
            h[:, None], h[:, None], h[:, None], attn_mask=attention_mask[:, None, None, :].bool())
        return (a[:, 0] + h).mean(dim=1).square().sum()


def test_an_op_across_tokens_keeps_the_padding_and_says_which():
    torch.manual_seed(0)
    model = _MeanPooled()
    ids = torch.randint(0, 50, (2, 8))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    expected = model(ids, mask)
    rt = trainrt.RTModule(copy.deepcopy(model))
    torch.testing.assert_close(rt(ids, mask), expected)
    (reason,) = [p.padding_elimination for p in _programs(rt)]
    assert "ReduceMean" in reason and "across tokens" in reason, reason


def test_without_an_attention_mask_nothing_is_dropped():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=96, n_positions=32, use_cache=False,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 96, (2, 8))
    rt = trainrt.RTModule(copy.deepcopy(model))
    torch.testing.assert_close(rt(input_ids=ids, labels=ids).loss, model(input_ids=ids, labels=ids).loss)
    (reason,) = [p.padding_elimination for p in _programs(rt)]
    assert not reason.endswith("kept tokens"), reason


@pytest.mark.parametrize("variable", ["TRAINRT_ENABLE_EMBEDDING_SPARSE_OPTIMIZER",
                                      "ORTMODULE_ENABLE_EMBEDDING_SPARSE_OPTIMIZER"])
def test_off_by_default_and_on_by_either_spelling(monkeypatch, variable):
    monkeypatch.delenv("TRAINRT_ENABLE_EMBEDDING_SPARSE_OPTIMIZER")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=96, n_positions=32, use_cache=False,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    batch = _batches(96, "right", steps=1)[0]
    off = trainrt.RTModule(transformers.GPT2LMHeadModel(config))
    off(**batch)
    assert [p.padding_elimination for p in _programs(off)] == [""]
    monkeypatch.setenv(variable, "1")
    on = trainrt.RTModule(transformers.GPT2LMHeadModel(config))
    on(**batch)
    assert [p.padding_elimination for p in _programs(on)][0].endswith("kept tokens")


def test_the_density_inspector_says_what_was_skipped(monkeypatch, trainrt_log):
    monkeypatch.setenv("TRAINRT_PRINT_INPUT_DENSITY", "1")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=96, n_positions=256, use_cache=False,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    rt = trainrt.RTModule(transformers.GPT2LMHeadModel(config))
    ids = torch.randint(2, 96, (2, 128))
    mask = torch.ones_like(ids)
    mask[1, 28:] = 0  # 156 of 256 tokens kept: 192 as planned, 64 skipped
    rt(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss.backward()
    (programs,) = _programs(rt)
    # One layer's products per token: c_attn 32 x 96, c_proj 32 x 32, c_fc 32 x 128, mlp c_proj 128 x 32, and
    # the LM head 32 x 96 (forward 2 K N each; forward and backward three times that).
    assert programs.padding_row_flops == 2 * 32 * (96 + 32 + 128 + 96) + 2 * 128 * 32
    gflop = 3 * 64 * programs.padding_row_flops / 1e9
    assert f"padding elimination: 192 of 256 tokens computed, 64 skipped ({gflop:.2f} GFLOP" in trainrt_log.text
    assert "label sparsity (" in trainrt_log.text and "the loss reads 192 of 192 rows" in trainrt_log.text


def test_bf16_autocast_matches_the_engine_without_it(monkeypatch):
    """Under mixed_precision="bf16" the projections leave the kept rows in bf16; they are scattered
    back in f32. Against the same engine without padding elimination: the loss within 1e-3, the
    gradients within bf16's rounding (the products sum the rows in another order)."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=96, n_positions=32, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    model = transformers.GPT2LMHeadModel(config)
    batch = _batches(96, "right", steps=1)[0]
    results = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("TRAINRT_ENABLE_EMBEDDING_SPARSE_OPTIMIZER", flag)
        rt = trainrt.RTModule(copy.deepcopy(model), mixed_precision="bf16")
        out = rt(**batch)
        out.loss.backward()
        assert rt.fallback_reason is None
        results[flag] = (float(out.loss), {n: p.grad for n, p in rt.named_parameters()}, _programs(rt))
    assert results["1"][2][0].padding_elimination.endswith("kept tokens")
    assert abs(results["1"][0] - results["0"][0]) <= 1e-3 * abs(results["0"][0])
    for name, g in results["0"][1].items():
        if name.endswith("attn.c_attn.bias"):
            continue  # its key third's true gradient is zero: rounding noise on both sides
        assert (results["1"][1][name] - g).abs().max() <= 2e-2 * g.abs().max() + 1e-6, name


def test_a_model_returning_its_attention_cache():
    """use_cache=True (the config's default) returns the keys and values: the pass still applies, the
    loss, gradients and logits at kept positions are eager's, and so are the cache's kept positions."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=1, vocab_size=96, max_position_embeddings=32)
    assert config.use_cache
    model = transformers.LlamaForCausalLM(config)
    batch = _batches(96, "right", steps=1)[0]
    eager = copy.deepcopy(model)(**batch)
    rt = trainrt.RTModule(copy.deepcopy(model))
    ours = rt(**batch)
    assert [p.padding_elimination for p in _programs(rt)][0].endswith("kept tokens")
    assert abs(float(ours.loss) - float(eager.loss)) <= 1e-5 * abs(float(eager.loss))
    kept = batch["attention_mask"].bool()
    torch.testing.assert_close(ours.logits[kept], eager.logits[kept], rtol=1e-4, atol=1e-5)
    for layer in range(config.num_hidden_layers):
        for ours_kv, eager_kv in zip(_layer_cache(ours.past_key_values, layer), _layer_cache(eager.past_key_values, layer)):
            # (B, heads, S, head dim): the kept tokens' keys and values
            torch.testing.assert_close(ours_kv.transpose(1, 2)[kept], eager_kv.transpose(1, 2)[kept], rtol=1e-4, atol=1e-5)


def _layer_cache(cache, layer):
    """(keys, values) of one layer of a transformers cache, across its versions' layouts."""
    if hasattr(cache, "layers"):
        return cache.layers[layer].keys, cache.layers[layer].values
    return cache.key_cache[layer], cache.value_cache[layer]
