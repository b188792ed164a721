"""More Hugging Face model families train through RTModule as in eager PyTorch.

Each family is built tiny (2 layers, width 32) from a config, no download: the Llama family
(RMSNorm, rotary embeddings through sin / cos, SiLU-gated MLP, grouped-query attention), Qwen2
(biased q/k/v), Mistral, GPT-NeoX (partial rotary, parallel residual), DistilBERT and RoBERTa
masked LMs, ViT image classification (Conv patch embedding) and T5 (encoder-decoder; a learned
relative position bias added to the attention scores, so the fused attention gives its mask a
gradient; labels shifted into decoder inputs by in-place writes). Same seed, init and data, 8
AdamW steps with dropout off, no fallback allowed: every step's loss and the final parameters
agree with eager. A capture plus 8 steps takes 5-20 s on the 2-core machine; the quick run keeps
Llama, ViT and one T5 step (its learned attention bias) and marks the rest slow.
"""

import copy

import pytest
import torch

import trainrt
from parity import assert_params_close, train_both

transformers = pytest.importorskip("transformers")

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

VOCAB = 100
STEPS = 8


class LossOf(torch.nn.Module):
    """model(**dict(zip(names, inputs))).loss: positional inputs for parity.train_both."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *inputs):
        return self.model(**dict(zip(self.names, inputs))).loss


def decoder_config(cls, **extra):
    """A 2-layer causal LM config with 4 query heads over 2 key/value heads."""
    return cls(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, **extra)


def make_model(family: str) -> torch.nn.Module:
    t = transformers
    if family == "llama":
        return t.LlamaForCausalLM(decoder_config(t.LlamaConfig))
    if family == "qwen2":
        return t.Qwen2ForCausalLM(decoder_config(t.Qwen2Config))
    if family == "mistral":
        return t.MistralForCausalLM(decoder_config(t.MistralConfig))
    if family == "gpt-neox":
        config = t.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, max_position_embeddings=64, rotary_pct=0.5,
                                 hidden_dropout=0.0, attention_dropout=0.0)
        return t.GPTNeoXForCausalLM(config)
    if family == "distilbert":
        config = t.DistilBertConfig(vocab_size=VOCAB, dim=32, hidden_dim=64, n_layers=2, n_heads=4,
                                    max_position_embeddings=64, dropout=0.0, attention_dropout=0.0)
        return t.DistilBertForMaskedLM(config)
    if family == "roberta":
        config = t.RobertaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0)
        return t.RobertaForMaskedLM(config)
    if family == "vit":
        config = t.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, intermediate_size=64,
                             num_hidden_layers=2, num_attention_heads=4, num_labels=5, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
        return t.ViTForImageClassification(config)
    if family == "t5":
        config = t.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                            num_heads=4, relative_attention_num_buckets=8, dropout_rate=0.0,
                            decoder_start_token_id=0, pad_token_id=0)
        return t.T5ForConditionalGeneration(config)
    raise ValueError(family)


def make_batches(family: str, batch: int = 3, seq: int = 10):
    """(input names, step -> inputs). Token models: ids in [2, VOCAB) (RoBERTa's padding id is 1)
    with the last row padded (attention_mask 0, labels -100); ViT: images and class labels; T5:
    decoder labels of another length than the encoder's input."""
    names = ("pixel_values", "labels") if family == "vit" else ("input_ids", "attention_mask", "labels")

    def batches(step):  # one batch, repeated: it is learned, so the loss falls
        g = torch.Generator().manual_seed(0)
        if family == "vit":
            return torch.randn(batch, 3, 16, 16, generator=g), torch.randint(0, 5, (batch,), generator=g)
        ids = torch.randint(2, VOCAB, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[-1, seq - 3:] = 0
        labels = torch.randint(2, VOCAB, (batch, seq - 3), generator=g) if family == "t5" else ids.clone()
        if family != "t5":
            labels[mask == 0] = -100
        return ids, mask, labels

    return names, batches


FAMILIES = ["llama", "vit", *(pytest.param(f, marks=pytest.mark.slow)
                               for f in ("t5", "qwen2", "mistral", "gpt-neox", "distilbert", "roberta"))]


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    """A model the engine cannot run fails the test instead of silently running in torch."""
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


@pytest.mark.parametrize("family", FAMILIES)
def test_family_trains_as_eager(family):
    names, batches = make_batches(family)
    eager, ours, losses = train_both(lambda: LossOf(make_model(family).train(), names), batches, steps=STEPS)
    losses_e, losses_o = zip(*losses)
    torch.testing.assert_close(torch.tensor(losses_o), torch.tensor(losses_e), rtol=1e-4, atol=0)
    assert losses_e[-1] < losses_e[0]
    # atol 1e-4: ViT's key biases start at 0 and drift by AdamW steps of gradient rounding noise
    # (2e-5 apart after 8 steps); a wrong gradient moves a weight by about lr = 1e-3 per step.
    assert_params_close(eager, ours, atol=1e-4)


def test_t5_position_bias_gets_the_gradient_eager_gives_it():
    """T5's relative_attention_bias reaches the loss only through the attention mask: its
    gradient is the fused attention's dS summed over batch (and, per bucket, over positions)."""
    names, batches = make_batches("t5")
    torch.manual_seed(0)
    eager = LossOf(make_model("t5").train(), names)
    ours = trainrt.RTModule(copy.deepcopy(eager))
    eager(*batches(0)).backward()
    ours(*batches(0)).backward()
    for stack in ("encoder", "decoder"):
        bias_e = getattr(eager.model, stack).block[0].layer[0].SelfAttention.relative_attention_bias.weight.grad
        bias_o = getattr(ours.model, stack).block[0].layer[0].SelfAttention.relative_attention_bias.weight.grad
        assert torch.count_nonzero(bias_e) > 0
        torch.testing.assert_close(bias_o, bias_e, rtol=1e-4, atol=1e-7)
