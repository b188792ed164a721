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
import warnings

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


def test_rtmodule_presents_the_wrapped_model(tmp_path):
    """What the Trainer, accelerate and PEFT read from a model is the wrapped model's."""
    plain = make_model("gpt2")
    model = trainrt.RTModule(plain)
    assert inspect.signature(model.forward) == inspect.signature(plain.forward)
    assert isinstance(model, transformers.PreTrainedModel) and type(model) is trainrt.RTModule
    assert model.config is plain.config and model.main_input_name == "input_ids"
    assert model.can_generate() == plain.can_generate() and model.generation_config is plain.generation_config
    assert model._keys_to_ignore_on_save == plain._keys_to_ignore_on_save
    assert [n for n, _ in model.named_children()] == [n for n, _ in plain.named_children()]
    assert transformers.trainer_pt_utils.get_parameter_names(model, [torch.nn.LayerNorm]) == \
        transformers.trainer_pt_utils.get_parameter_names(plain, [torch.nn.LayerNorm])
    model.save_pretrained(str(tmp_path / "saved"))
    from safetensors.torch import load_file

    assert set(load_file(str(tmp_path / "saved" / "model.safetensors"))) <= set(plain.state_dict())
    for copied in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert type(copied) is trainrt.RTModule and copied.forward.__self__ is copied
        assert inspect.signature(copied.forward) == inspect.signature(plain.forward)


@pytest.mark.parametrize("optim", ["adamw_trainrt_fused", "adamw_trainrt_fused_in_backward"])
def test_resuming_from_a_checkpoint_gives_the_uninterrupted_losses(optim, tmp_path):
    clip = dict(max_grad_norm=0.0) if optim.endswith("in_backward") else {}
    whole = arguments(RTTrainingArguments, tmp_path / "whole", optim=optim, max_steps=6, **clip)
    _, losses, _, _ = run(RTTrainer, make_model("gpt2"), whole, "gpt2")
    halves = arguments(RTTrainingArguments, tmp_path / "halves", optim=optim, max_steps=6, save_strategy="steps",
                       save_steps=3, **clip)
    first = RTTrainer(model=make_model("gpt2"), args=halves, train_dataset=make_data("gpt2", 16, 1))
    first.train()
    resumed = RTTrainer(model=make_model("gpt2"), args=halves, train_dataset=make_data("gpt2", 16, 1))
    resumed.train(resume_from_checkpoint=str(tmp_path / "halves" / "out" / "checkpoint-3"))
    after = [h["loss"] for h in resumed.state.log_history if "loss" in h]
    assert_ran_in_engine(rtmodule_of(resumed), captures=1)
    assert_close(after[-3:], losses[3:], rtol=1e-6)


def test_fused_in_backward_matches_a_step_after_the_backward(tmp_path):
    args = arguments(RTTrainingArguments, tmp_path / "in", optim="adamw_trainrt_fused_in_backward", max_grad_norm=0.0)
    trainer, losses, eval_loss, _ = run(RTTrainer, make_model("bert"), args, "bert")
    assert trainer.optimizer.optimizer.step_in_backward  # accelerate's AcceleratedOptimizer around FusedAdam
    plain = arguments(TrainingArguments, tmp_path / "plain", optim="adamw_torch", max_grad_norm=0.0)
    _, ref_losses, ref_eval_loss, _ = run(Trainer, make_model("bert"), plain, "bert")
    assert_ran_in_engine(rtmodule_of(trainer))
    assert all(p.grad is None for p in trainer.model.parameters())
    assert_close(losses, ref_losses)
    assert eval_loss == pytest.approx(ref_eval_loss, rel=1e-4)


@pytest.mark.parametrize("setting, reason", [(dict(), "max_grad_norm=0"),
                                             (dict(max_grad_norm=0.0, gradient_accumulation_steps=2),
                                              "gradient_accumulation_steps=1")])
def test_fused_in_backward_refuses_clipping_and_accumulation(setting, reason, tmp_path):
    with pytest.raises(ValueError, match=reason):
        arguments(RTTrainingArguments, tmp_path, optim="adamw_trainrt_fused_in_backward", **setting)


def test_gradient_accumulation_matches_plain_trainer(tmp_path):
    args = arguments(RTTrainingArguments, tmp_path / "ours", per_device_train_batch_size=2, gradient_accumulation_steps=2)
    trainer, losses, eval_loss, _ = run(RTTrainer, make_model("gpt2"), args, "gpt2")
    plain = arguments(TrainingArguments, tmp_path / "plain", optim="adamw_torch", per_device_train_batch_size=2,
                      gradient_accumulation_steps=2)
    _, ref_losses, ref_eval_loss, _ = run(Trainer, make_model("gpt2"), plain, "gpt2")
    assert_ran_in_engine(rtmodule_of(trainer))
    assert_close(losses, ref_losses)
    assert eval_loss == pytest.approx(ref_eval_loss, rel=1e-4)


def test_bf16_runs_the_engines_mixed_precision(tmp_path):
    """bf16=True: RTModule(mixed_precision="bf16"); losses near the Trainer's own bf16 autocast run (bf16
    rounding differs in order, so not to 1e-4)."""
    trainer, losses, eval_loss, _ = run(RTTrainer, make_model("gpt2"), arguments(RTTrainingArguments, tmp_path / "o",
                                                                                  bf16=True), "gpt2")
    model = rtmodule_of(trainer)
    assert model._runtime.mixed_precision == "bf16"
    _, ref_losses, ref_eval_loss, _ = run(Trainer, make_model("gpt2"),
                                          arguments(TrainingArguments, tmp_path / "p", optim="adamw_torch", bf16=True),
                                          "gpt2")
    assert_ran_in_engine(model)
    assert_close(losses, ref_losses, rtol=2e-2)
    assert eval_loss == pytest.approx(ref_eval_loss, rel=2e-2)


@pytest.mark.parametrize("kind", KINDS)
def test_export_onnx_writes_the_trained_eval_graph_that_onnxruntime_runs(kind, tmp_path):
    """Standard ONNX ops only (no com.trainrt), run by onnxruntime and trainrt.Session on a batch of another
    size (BERT's padded) with the trained model's logits; standard_ops=False keeps the fused ops."""
    import onnx
    import onnxruntime

    trainer = ORTTrainer(model=make_model(kind), args=arguments(ORTTrainingArguments, tmp_path, max_steps=2),
                         train_dataset=make_data(kind, 8, 1), eval_dataset=make_data(kind, 3, 2),
                         feature="text-classification", onnx_model_path=str(tmp_path / "model.onnx"))
    trainer.train()
    assert trainer.feature == "text-classification"
    path = trainer.export_onnx()
    exported = onnx.load(path)
    assert exported.graph.output[0].name == "logits" or kind == "gpt2"  # GPT-2 returns its cache too: a tuple
    assert {n.domain for n in exported.graph.node} <= {"", "ai.onnx"}
    assert {o.domain for o in exported.opset_import} <= {"", "ai.onnx"}
    names = ("pixel_values",) if kind == "vit" else ("input_ids", "attention_mask")
    batch = transformers.default_data_collator([{k: v for k, v in r.items() if k in names}
                                                for r in make_data(kind, 5, 4)])  # another batch size
    with torch.no_grad():
        expected = rtmodule_of(trainer)._module.eval()(**batch).logits
    ort = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    logits = ort.run(None, {i.name: batch[i.name].numpy() for i in ort.get_inputs()})[0]
    torch.testing.assert_close(torch.from_numpy(logits), expected, rtol=1e-4, atol=1e-5)
    for file in (path, trainer.export_onnx(tmp_path / "fused.onnx", standard_ops=False)):
        session = trainrt.Session(str(file))
        logits = session.run([batch[name].numpy() for name in session.input_names])[0]
        torch.testing.assert_close(torch.from_numpy(logits), expected, rtol=1e-4, atol=1e-5)
    assert "com.trainrt" in {n.domain for n in onnx.load(str(tmp_path / "fused.onnx")).graph.node}


def test_optimum_names_pick_the_fused_optimizer(tmp_path):
    from trainrt.optim import FusedAdam

    args = arguments(ORTTrainingArguments, tmp_path, optim="adamw_ort_fused")
    assert args.optim == "adamw_trainrt_fused"
    optimizer_cls, kwargs = ORTTrainer.get_optimizer_cls_and_kwargs(args)
    assert optimizer_cls is FusedAdam and kwargs["lr"] == 1e-3 and not kwargs["step_in_backward"]
    assert RTTrainingArguments(output_dir=str(tmp_path)).optim == "adamw_trainrt_fused"  # the default


def logged(trainer, key: str) -> list[float]:
    return [h[key] for h in trainer.state.log_history if "loss" in h]


@pytest.mark.parametrize("optim, ref_optim, lr", [("sgd", "sgd", 0.5), ("adamw_trainrt_fused", "adamw_torch", 1e-3)])
@pytest.mark.parametrize("max_grad_norm", [0.05, 0.0])
def test_max_grad_norm_clips_with_the_fused_norm_as_the_trainer_does(optim, ref_optim, lr, max_grad_norm, tmp_path):
    """Logged grad_norm and losses of RTTrainer, whose accelerate cannot clip, within 1e-4 of a plain
    Trainer's. max_grad_norm 0.05 is below every step's norm, so each step is clipped; with SGD at lr 0.5
    an unclipped step changes the next loss by ~3e-3 (with Adam, clipping by a factor near 1 changes the
    losses by less than 1e-5: its row checks the norms). 0.0: no clipping, the norm is still logged."""
    plain = Trainer(model=make_model("gpt2"), train_dataset=make_data("gpt2", 16, 1),
                    args=arguments(TrainingArguments, tmp_path / "plain", optim=ref_optim, learning_rate=lr,
                                   max_grad_norm=max_grad_norm))
    plain.train()
    ours = RTTrainer(model=make_model("gpt2"), train_dataset=make_data("gpt2", 16, 1),
                     args=arguments(RTTrainingArguments, tmp_path / "ours", optim=optim, learning_rate=lr,
                                    max_grad_norm=max_grad_norm))

    def accelerates_clipping(*args, **kwargs):
        raise AssertionError("RTTrainer clipped through accelerate, not the engine's fused norm")

    ours.accelerator.clip_grad_norm_ = accelerates_clipping
    ours.train()
    assert_ran_in_engine(rtmodule_of(ours), captures=1)
    assert_close(logged(ours, "grad_norm"), logged(plain, "grad_norm"))
    assert_close(logged(ours, "loss"), logged(plain, "loss"))
    if max_grad_norm:
        assert min(logged(plain, "grad_norm")) > 20 * max_grad_norm


def test_fused_clip_grad_norm_is_torchs_clip_grad_norm():
    """Norm and clipped gradients as torch.nn.utils.clip_grad_norm_ gives them; gradients it does not
    serve (bf16, a non-contiguous view) are left alone and torch's clipping is asked for (None)."""
    from trainrt.hf.clipping import clip_grad_norm_

    torch.manual_seed(0)
    for max_norm, scale in ((1.0, 1.0), (1.0, 1e-3), (float("inf"), 1.0)):
        ours = [torch.nn.Parameter(torch.randn(n)) for n in (7, 300, 1)]
        theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
        for a, b in zip(ours, theirs):
            a.grad = torch.randn(a.shape) * scale
            b.grad = a.grad.clone()
        ours.append(torch.nn.Parameter(torch.zeros(2)))  # no gradient: left out, as torch leaves it out
        norm = clip_grad_norm_(ours, max_norm)
        expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
        assert norm == pytest.approx(expected.item(), rel=1e-6)
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=0)
    assert clip_grad_norm_([], 1.0) == 0.0
    for grad in (torch.ones(4, dtype=torch.bfloat16), torch.ones(4, 2).t()):
        p = torch.nn.Parameter(torch.ones(grad.shape, dtype=grad.dtype))
        p.grad = grad
        assert clip_grad_norm_([p], 0.1) is None
        assert bool((p.grad == 1).all())


def test_optimum_save_onnx_writes_the_training_capture_with_its_loss(tmp_path, monkeypatch):
    """save_onnx + onnx_prefix: the wrapped model saves its graphs into output_dir when it is captured
    (the loss, computed from the labels, is inside the captured graph); onnx_log_level sets its log."""
    import onnx

    monkeypatch.delenv("TRAINRT_SAVE_ONNX_PATH", raising=False)
    monkeypatch.delenv("ORTMODULE_SAVE_ONNX_PATH", raising=False)
    monkeypatch.delenv("TRAINRT_LOG_LEVEL", raising=False)
    monkeypatch.delenv("ORTMODULE_LOG_LEVEL", raising=False)
    args = arguments(ORTTrainingArguments, tmp_path, max_steps=1, save_onnx=True, onnx_prefix="gpt",
                     onnx_log_level="INFO")
    trainer = ORTTrainer(model=make_model("gpt2"), args=args, train_dataset=make_data("gpt2", 8, 1))
    trainer.train()
    model = rtmodule_of(trainer)
    assert_ran_in_engine(model, captures=1)
    assert model._debug.log_level == trainrt.LogLevel.INFO
    out = tmp_path / "out"
    for suffix in ("forward", "training", "optimized_forward", "optimized_backward"):
        onnx.checker.check_model(onnx.load(str(out / f"gpt_{suffix}.onnx")))
    captured = onnx.load(str(out / "gpt_forward.onnx")).graph
    assert any("labels" in i.name for i in captured.input)
    loss = captured.output[0].type.tensor_type
    assert len(loss.shape.dim) == 0 and loss.elem_type == onnx.TensorProto.FLOAT  # the scalar loss first
    trainer.evaluate(make_data("gpt2", 4, 2))  # an eval capture: saved beside the training one
    assert (out / "gpt_eval_forward.onnx").exists()
    assert onnx.load(str(out / "gpt_forward.onnx")).graph == captured


@pytest.mark.parametrize("setting, message", [(dict(save_onnx=True), "onnx_prefix must be given"),
                                              (dict(onnx_log_level="LOUD"), "onnx_log_level='LOUD'")])
def test_optimum_arguments_refuse_what_optimum_refuses(setting, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        arguments(ORTTrainingArguments, tmp_path, **setting)


def test_optimum_use_module_with_loss_trains_as_without_and_warns_where_the_loss_is_outside(tmp_path):
    """The loss is in the engine's graph either way: the same losses. With label smoothing the Trainer
    computes the loss itself, outside the engine: use_module_with_loss=True says so."""
    runs = {}
    for flag in (False, True):
        args = arguments(ORTTrainingArguments, tmp_path / str(flag), use_module_with_loss=flag)
        trainer = ORTTrainer(model=make_model("bert"), args=args, train_dataset=make_data("bert", 16, 1))
        trainer.train()
        assert_ran_in_engine(rtmodule_of(trainer), captures=1)
        runs[flag] = logged(trainer, "loss")
    assert runs[True] == runs[False]
    smoothed = arguments(ORTTrainingArguments, tmp_path / "smooth", use_module_with_loss=True, label_smoothing_factor=0.1)
    with pytest.warns(UserWarning, match="stays outside the engine"):
        ORTTrainer(model=make_model("bert"), args=smoothed, train_dataset=make_data("bert", 16, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        ORTTrainer(model=make_model("bert"), args=arguments(ORTTrainingArguments, tmp_path / "plain",
                                                            use_module_with_loss=True), train_dataset=make_data("bert", 16, 1))
