"""transformers' Trainer trains, evaluates, predicts, saves and resumes with the model in the engine.

GPT-2 causal LM, BERT sequence classification (padded rows) and a ViT image classifier from tiny
configs (nothing downloaded), dropout off, trained a few steps (weight decay and the default
max_grad_norm=1.0 clipping on) through trainrt.hf.RTTrainer, through a plain Trainer over
trainrt.RTModule(model) and through trainrt.optimum's names; each is compared with a plain Trainer
run from the same seed: logged losses and eval_loss within 1e-4 relative, the same predictions, and
a saved model that AutoModel*.from_pretrained loads with the same logits. TRAINRT_FALLBACK_POLICY is
FALLBACK_DISABLE: a model that fell back to PyTorch fails instead of passing unseen.
"""

import copy
import inspect
import pickle

import pytest
import torch

import trainrt

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import Trainer, TrainingArguments  # noqa: E402

from trainrt.hf import RTTrainer, RTTrainingArguments  # noqa: E402
from trainrt.optimum import ORTTrainer, ORTTrainingArguments  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

VOCAB, SEQ, LABELS = 100, 12, 3
KINDS = ["gpt2", "bert", "vit"]


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def make_model(kind: str) -> torch.nn.Module:
    """A 1-layer, width-32 model of `kind`, initialized from seed 0."""
    from transformers import (BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel, ViTConfig,
                              ViTForImageClassification)

    torch.manual_seed(0)
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=32,
                                          bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                                          attn_pdrop=0.0))
    if kind == "bert":
        return BertForSequenceClassification(BertConfig(
            num_hidden_layers=1, hidden_size=32, num_attention_heads=4, intermediate_size=64, vocab_size=VOCAB,
            max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            num_labels=LABELS))
    return ViTForImageClassification(ViTConfig(
        image_size=8, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=LABELS))


def make_data(kind: str, n: int, seed: int) -> list[dict]:
    """n examples; BERT's have padding (attention_mask 0, id 0) at the end of every other row, and each
    example carries a column the model does not take (the Trainer drops it by forward's signature)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        if kind == "vit":
            row = dict(pixel_values=torch.randn(3, 8, 8, generator=g), labels=int(torch.randint(0, LABELS, (), generator=g)))
        else:
            ids = torch.randint(1, VOCAB, (SEQ,), generator=g)
            mask = torch.ones(SEQ, dtype=torch.long)
            if kind == "bert" and i % 2:
                mask[SEQ - 1 - i % 5:] = 0
                ids[mask == 0] = 0
            labels = ids.clone() if kind == "gpt2" else int(torch.randint(0, LABELS, (), generator=g))
            row = dict(input_ids=ids, attention_mask=mask, labels=labels)
        rows.append({**row, "idx": i})
    return rows


def arguments(cls, tmp_path, **overrides):
    options = dict(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True, per_device_train_batch_size=4,
                   per_device_eval_batch_size=3, max_steps=4, logging_steps=1, save_strategy="no",
                   dataloader_num_workers=0, learning_rate=1e-3, weight_decay=0.01, seed=7, disable_tqdm=True)
    return cls(**{**options, **overrides})


def run(trainer_cls, model, args, kind: str):
    """Trains, evaluates and predicts; returns (trainer, logged losses, eval_loss, predictions)."""
    trainer = trainer_cls(model=model, args=args, train_dataset=make_data(kind, 16, 1),
                          eval_dataset=make_data(kind, 7, 2))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    eval_loss = trainer.evaluate()["eval_loss"]
    predictions = trainer.predict(make_data(kind, 7, 3)).predictions
    return trainer, losses, eval_loss, predictions[0] if isinstance(predictions, tuple) else predictions


def assert_close(ours, theirs, rtol=1e-4):
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs):
        assert a == pytest.approx(b, rel=rtol), (ours, theirs)


def rtmodule_of(trainer) -> trainrt.RTModule:
    model = trainer.model
    assert type(model) is trainrt.RTModule
    return model


def assert_ran_in_engine(model: trainrt.RTModule, captures: int = 2):
    """Train and eval captures at least (eval runs with and without labels: one more)."""
    assert model.fallback_reason is None
    assert model.num_captures >= captures


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Plain Trainer runs per model kind, computed once: (losses, eval_loss, predictions)."""
    cache = {}

    def get(kind):
        if kind not in cache:
            tmp = tmp_path_factory.mktemp(f"plain_{kind}")
            _, *results = run(Trainer, make_model(kind), arguments(TrainingArguments, tmp, optim="adamw_torch"), kind)
            cache[kind] = results
        return cache[kind]

    return get


def auto_class(kind: str):
    return {"gpt2": transformers.AutoModelForCausalLM, "bert": transformers.AutoModelForSequenceClassification,
            "vit": transformers.AutoModelForImageClassification}[kind]


def assert_reloads(trainer, kind: str, tmp_path):
    """save_model writes save_pretrained files (keys without `_module.`) that reload with the same logits."""
    trainer.save_model(str(tmp_path / "saved"))
    reloaded = auto_class(kind).from_pretrained(str(tmp_path / "saved")).eval()
    trained = rtmodule_of(trainer)._module.eval()
    batch = transformers.default_data_collator([{k: v for k, v in r.items() if k != "idx"}
                                                for r in make_data(kind, 3, 4)])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, trained(**batch).logits, rtol=0, atol=0)


ROUTES = {
    "RTTrainer": lambda kind, tmp: (RTTrainer, make_model(kind), arguments(RTTrainingArguments, tmp)),
    "Trainer(RTModule)": lambda kind, tmp: (Trainer, trainrt.RTModule(make_model(kind)),
                                            arguments(TrainingArguments, tmp, optim="adamw_torch")),
    "ORTTrainer": lambda kind, tmp: (ORTTrainer, make_model(kind),
                                     arguments(ORTTrainingArguments, tmp, optim="adamw_ort_fused")),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("route", list(ROUTES))
def test_trains_evaluates_predicts_and_saves_as_plain_trainer(route, kind, reference, tmp_path):
    trainer_cls, model, args = ROUTES[route](kind, tmp_path)
    trainer, losses, eval_loss, predictions = run(trainer_cls, model, args, kind)
    ref_losses, ref_eval_loss, ref_predictions = reference(kind)
    assert_ran_in_engine(rtmodule_of(trainer))
    assert_close(losses, ref_losses)
    assert eval_loss == pytest.approx(ref_eval_loss, rel=1e-4)
    assert predictions.shape == ref_predictions.shape
    torch.testing.assert_close(torch.as_tensor(predictions), torch.as_tensor(ref_predictions), rtol=1e-3, atol=1e-4)
    assert_reloads(trainer, kind, tmp_path)
