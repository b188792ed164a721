"""The coverage sweep (python -m trainrt.coverage): its shrink, batches, outcome and report without
training, and, marked slow, a fixed sample of architectures that pass today still passing.

The sample spans the six tasks; each one is built tiny from its own config, trained 3 SGD steps in
eager and through RTModule with fallback disabled, and compared (trainrt/coverage/run.py), in a
worker process with a time limit (isolation.py). About 4 minutes on the 2-core machine.
"""

import dataclasses

import pytest
import torch

import trainrt

transformers = pytest.importorskip("transformers")

from trainrt.capture.errors import CaptureError, UnsupportedATenOp, UnsupportedATenOps  # noqa: E402
from trainrt.coverage import shrink as S  # noqa: E402
from trainrt.coverage.architectures import TASKS, architectures  # noqa: E402
from trainrt.coverage.batches import BATCH, NUM_LABELS, SEQ, make_batches  # noqa: E402
from trainrt.coverage.isolation import run_isolated  # noqa: E402
from trainrt.coverage.outcome import Outcome, classify  # noqa: E402
from trainrt.coverage.report import markdown_backlog, summary  # noqa: E402
from transformers.utils import ModelOutput  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

# Architectures that pass the sweep today, across the tasks: each must keep passing.
SAMPLE = [
    "causal-lm/llama", "causal-lm/gpt2", "causal-lm/qwen3", "causal-lm/phi3", "causal-lm/gemma2",
    "causal-lm/opt", "causal-lm/bloom", "causal-lm/falcon", "causal-lm/gptj", "causal-lm/ctrl",
    "causal-lm/mistral", "causal-lm/gpt_neox",
    "masked-lm/bert", "masked-lm/albert", "masked-lm/electra", "masked-lm/roberta", "masked-lm/distilbert",
    "masked-lm/deberta-v2", "masked-lm/modernbert",
    "seq-cls/llama", "seq-cls/gpt2", "seq-cls/bert",
    "image-cls/vit", "image-cls/convnext", "image-cls/resnet", "image-cls/beit", "image-cls/deit",
    "seq2seq/bart", "seq2seq/marian",
    "audio-cls/wav2vec2", "audio-cls/hubert", "audio-cls/whisper", "audio-cls/audio-spectrogram-transformer",
    # MoE layers (topk, sort, histc, grouped matmul, scatter), a cache export cannot flatten, a
    # no_grad block inside forward, an encoder-decoder shifting labels behind its start token.
    "causal-lm/qwen3_moe", "causal-lm/mixtral", "causal-lm/deepseek_v3", "causal-lm/minimax",
    "causal-lm/phi4_multimodal", "seq2seq/t5",
    # A router whose scores all tie (torch's topk order), complex rotary embeddings, tensor_split, FFTs.
    "causal-lm/afmoe", "causal-lm/llama4_text", "causal-lm/mamba", "masked-lm/fnet",
    # Experts split by counts read with .tolist() (sizes known when the step runs), index_add.
    "causal-lm/jetmoe",
    # A loss branch on tensor values (captured per branch, checked every call); a bool .item() branch.
    "seq-cls/deberta-v2", "seq2seq/prophetnet",
    # Random draws in the router (sparsemixer's exponential_, rand_like, uniform_), a clamp to a tensor.
    "causal-lm/phimoe",
]


def test_shrink_makes_a_decoder_tiny_and_consistent():
    config = S.shrink_config("llama")
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (S.WIDTH, S.LAYERS, S.HEADS)
    assert config.num_key_value_heads == S.KV_HEADS and config.num_attention_heads % config.num_key_value_heads == 0
    assert config.head_dim == S.HEAD_DIM  # derived in LlamaConfig from the shrunk sizes
    assert (config.intermediate_size, config.vocab_size, config.max_position_embeddings) == (S.FFN, S.VOCAB,
                                                                                            S.POSITIONS)
    assert config.attention_dropout == 0.0


def test_shrink_keeps_vision_stages_divisible_by_their_heads():
    config = S.shrink_config("swin", num_labels=NUM_LABELS)
    assert config.depths == (1, 1, 1, 1) and config.num_heads == (1, 2, 4, 8)
    widths = [config.embed_dim * 2 ** i for i in range(len(config.depths))]
    assert all(w % h == 0 for w, h in zip(widths, config.num_heads))
    assert (config.image_size, config.window_size, config.drop_path_rate) == (S.IMAGE, S.WINDOW, 0.0)
    assert S.shrink_config("convnext").hidden_sizes == (16, 32, 64, 128)  # (96, 192, 384, 768) / 6


def test_shrink_turns_off_every_random_part_of_an_audio_encoder():
    config = S.shrink_config("wav2vec2")
    assert set(config.conv_dim) == {S.AUDIO_CHANNELS}
    assert config.hidden_size % config.num_conv_pos_embedding_groups == 0
    for name in ("hidden_dropout", "attention_dropout", "activation_dropout", "final_dropout", "layerdrop",
                 "mask_time_prob"):
        assert getattr(config, name) == 0.0, name


def test_special_token_ids_move_into_the_tiny_vocab_and_stay_distinct():
    config = S.shrink_config("gpt2")  # bos = eos = 50256
    assert config.vocab_size == S.VOCAB
    assert config.bos_token_id < S.VOCAB and config.eos_token_id < S.VOCAB
    assert config.bos_token_id != config.eos_token_id
    assert config.pad_token_id == 0  # None in GPT-2's config: decoder classifiers need one


def _model(model_type: str, class_name: str, num_labels=None):
    torch.manual_seed(0)
    return getattr(transformers, class_name)(S.shrink_config(model_type, num_labels)).train()


def test_text_batches_pad_rows_and_ignore_their_labels():
    model = _model("llama", "LlamaForCausalLM")
    batch = make_batches("causal-lm", model.config, model)(0)
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    assert ids.shape == mask.shape == labels.shape == (BATCH, SEQ)
    assert mask[0].all() and (mask.sum(1) == torch.tensor([SEQ, SEQ - 2, SEQ - 4])).all()
    assert ((labels == -100) == (mask == 0)).all()
    assert (ids[mask == 0] == model.config.pad_token_id).all() and ids.max() < S.VOCAB

    mlm = make_batches("masked-lm", model.config, model)(1)["labels"]
    assert (mlm[:, 0] != -100).all() and (mlm == -100).sum() > BATCH * 4
    assert make_batches("seq-cls", model.config, model)(0)["labels"].shape == (BATCH,)
    assert not torch.equal(make_batches("causal-lm", model.config, model)(1)["input_ids"], ids)  # one per step


def test_shrink_fills_what_default_configs_leave_unset():
    """Defaults the models cannot run with: T5's start token, DeepSeek-V2's top-k, X-MOD's language."""
    t5 = S.shrink_config("t5")
    assert t5.decoder_start_token_id == t5.pad_token_id == 0
    assert S.shrink_config("deepseek_v2").num_experts_per_tok == S.EXPERTS_PER_TOKEN
    xmod = S.shrink_config("xmod")
    assert xmod.default_language == list(xmod.languages)[0]


def test_encoder_decoder_classifier_rows_end_in_eos_and_audio_lms_get_causal_labels():
    bart = _model("bart", "BartForSequenceClassification", NUM_LABELS)
    batch = make_batches("seq-cls", bart.config, bart)(0)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    eos = ids == bart.config.eos_token_id
    assert (eos.sum(1) == 1).all() and (eos.int().argmax(1) == mask.sum(1) - 1).all()
    with torch.no_grad():
        assert bart(**batch).loss is not None
    voxtral = _model("voxtral", "VoxtralForConditionalGeneration")  # no decoder_input_ids: it decodes the ids
    batch = make_batches("seq2seq", voxtral.config, voxtral)(0)
    assert batch["labels"].shape == batch["input_ids"].shape
    assert ((batch["labels"] == -100) == (batch["attention_mask"] == 0)).all()


def test_image_and_audio_batches_fit_their_models():
    vit = _model("vit", "ViTForImageClassification", NUM_LABELS)
    images = make_batches("image-cls", vit.config, vit)(0)
    assert images["pixel_values"].shape == (BATCH, 3, S.IMAGE, S.IMAGE) and images["labels"].max() < NUM_LABELS
    wav = _model("wav2vec2", "Wav2Vec2ForSequenceClassification", NUM_LABELS)
    audio = make_batches("audio-cls", wav.config, wav)(0)
    values, mask = audio["input_values"], audio["attention_mask"]
    assert values.shape == mask.shape and values.shape[0] == BATCH
    assert (mask[-1] == 0).any() and (values[mask == 0] == 0).all()
    with torch.no_grad():  # the batches run in eager: what the sweep compares against
        assert vit(**images).loss is not None and wav(**audio).loss is not None


def test_architectures_are_the_auto_mappings_with_aliases_run_once():
    archs = architectures(list(TASKS))
    names = {a.name for a in archs}
    assert {"causal-lm/llama", "masked-lm/bert", "seq-cls/gpt2", "image-cls/vit", "seq2seq/t5",
            "audio-cls/wav2vec2"} <= names
    gpt2 = next(a for a in archs if a.name == "causal-lm/gpt2")
    assert "gpt-sw3" in gpt2.aliases and "causal-lm/gpt-sw3" not in names  # GPT2LMHeadModel over GPT2Config
    assert [a.name for a in architectures(["causal-lm"], {"gpt-sw3", "causal-lm/llama"})] == ["causal-lm/gpt2",
                                                                                           "causal-lm/llama"]
    assert {"causal-lm/llama", "causal-lm/exaone"} <= {a.name for a in architectures(["causal-lm"], {"llamaforcausallm"})}


def test_a_capture_error_becomes_the_status_with_ops_and_counts():
    gaps = UnsupportedATenOps([UnsupportedATenOp("aten.foo.default", "foo"), UnsupportedATenOp("aten.foo.default", "foo_1"),
                               UnsupportedATenOp("aten.bar.default", "bar", reason="with mode 'x' is refused")])
    try:
        try:
            raise gaps
        except UnsupportedATenOp:
            raise RuntimeError("trainrt: cannot run M in the engine and fallback is disabled")
    except RuntimeError as err:  # what RTModule raises: the capture's error is its context
        status, detail, ops = classify(err)
    assert status == "untranslated"
    assert ops == {"aten.foo.default": 2, "aten.bar.default (with mode 'x' is refused)": 1}
    assert detail.startswith("aten.foo.default x2")
    status, detail, _ = classify(CaptureError("torch.export failed for M: Could not guard on u0\nmore"))
    assert (status, detail) == ("export", "Could not guard on u0")


def test_the_backlog_lists_every_failure_with_its_reason():
    outcomes = [Outcome("causal-lm/a", "A", "ok", first_step_s=1.0, step_ratio=0.5),
                Outcome("causal-lm/b", "B", "untranslated", "aten.foo.default x2", {"aten.foo.default": 2}),
                Outcome("image-cls/c", "C", "not-built", "ValueError: no"),
                Outcome("image-cls/d", "D", "untranslated", "aten.foo.default x1", {"aten.foo.default": 1})]
    assert summary(outcomes)[:3] == ["1 passed, 3 failed", "  causal-lm: 1 passed, 1 failed",
                                     "  image-cls: 0 passed, 2 failed"]
    text = markdown_backlog(outcomes, {"command": "python -m trainrt.coverage", "transformers": "5", "torch": "2"})
    assert "causal-lm/a" not in text
    assert "| causal-lm/b | B | aten.foo.default x2 |" in text and "| image-cls/c | C | ValueError: no |" in text
    assert "| aten.foo.default | 2 | causal-lm/b, image-cls/d |" in text


@pytest.mark.slow
def test_the_sample_still_passes(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")  # run.run sets it in each worker too
    archs = architectures(list(TASKS), {n.lower() for n in SAMPLE})
    assert sorted(a.name for a in archs) == sorted(SAMPLE)
    failures = [f"{o.name}: {o.status} {o.detail}" for o in run_isolated(archs, timeout_s=240) if not o.passed]
    assert not failures, "\n".join(failures)


class _Sine(torch.nn.Module):
    """loss = sin(w * x * gain): a large gain turns float32's rounding of w * x into a different
    loss than float64's (gain 1e7: |w x gain| ~ 1e6, float32 spacing there ~ 0.06)."""

    def __init__(self, gain: float):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.1234567, -0.3456789]))
        self.gain = gain

    def forward(self, x):
        return type("Output", (), {"loss": torch.sin(self.w * x * self.gain).sum()})()


def _float64_verdict(monkeypatch, gain: float, engine_offset: float) -> list[str]:
    """run._float64_disagreements for _Sine(gain), the engine's losses eager's plus engine_offset."""
    from trainrt.coverage import run as R

    def build(arch):
        torch.manual_seed(0)
        return _Sine(gain), lambda step: {"x": torch.tensor([1.0 + step / 3, 0.5 - step / 7])}

    monkeypatch.setattr(R, "build", build)
    eager, batches = build(None)
    before = {n: p.detach().clone() for n, p in eager.named_parameters()}
    optimizer = R._sgd(eager)
    losses_e = [R._step(eager, optimizer, batches(i)) for i in range(3)]
    return R._float64_disagreements(None, batches, 3, losses_e, [x + engine_offset for x in losses_e],
                                    eager, before)


def test_a_disagreement_eager_float32_shares_with_float64_is_rounding(monkeypatch):
    assert _float64_verdict(monkeypatch, gain=1e7, engine_offset=0.0), "eager float32 departs from float64"


def test_an_engine_far_from_float64_stays_a_mismatch(monkeypatch):
    assert _float64_verdict(monkeypatch, gain=1e7, engine_offset=100.0) == []


def test_a_well_conditioned_model_has_no_rounding_excuse(monkeypatch):
    assert _float64_verdict(monkeypatch, gain=1.0, engine_offset=0.0) == []


@dataclasses.dataclass
class _LossOutput(ModelOutput):
    loss: torch.Tensor | None = None


class _Tanh(torch.nn.Module):
    """A well-conditioned model: loss = sum(tanh(x W^T + b)^2)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return _LossOutput(loss=torch.tanh(self.lin(x)).pow(2).sum())


class _WrongGradient(torch.nn.Module):
    """Stands in for an engine whose losses are right and whose gradient of lin.weight is off by 1e-2
    in every element: a term of value 0 whose gradient is not."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        w = self.model.lin.weight
        return _LossOutput(loss=self.model(x).loss + 1e-2 * (w.sum() - w.sum().detach()))


def _same_weights_verdict(monkeypatch, engine=None) -> str | None:
    from trainrt.coverage import run as R

    def build(arch):
        torch.manual_seed(0)
        return _Tanh(), lambda step: {"x": torch.randn(5, 4, generator=torch.Generator().manual_seed(step))}

    monkeypatch.setattr(R, "build", build)
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    if engine is not None:
        monkeypatch.setattr(trainrt, "RTModule", engine)
    return R._same_weights_disagreements(None, build(None)[1], 3)


def test_the_engine_agrees_with_eager_on_its_own_weights(monkeypatch):
    assert _same_weights_verdict(monkeypatch) is None


def test_a_wrong_gradient_on_the_engines_own_weights_stays_a_mismatch(monkeypatch):
    verdict = _same_weights_verdict(monkeypatch, engine=_WrongGradient)
    assert verdict is not None and verdict.startswith("step 1: gradient of lin.weight"), verdict
