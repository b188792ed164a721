"""PEFT LoRA through the Trainer with the model in the engine.

A tiny GPT-2 (test_hf_trainer's, dropout off) with LoRA adapters (r 4) on its attention and MLP
projections (GPT-2's Conv1D: fan_in_fan_out), the adapters' B initialized non-zero so that they change
the first loss too. Trained through trainrt.hf.RTTrainer and through a plain Trainer over
trainrt.RTModule(peft_model), each against a plain Trainer run of the same PeftModel from the same seed:
logged losses and eval_loss within 1e-4; at every optimizer step the frozen base weights have grad None
and every adapter has a gradient; only the adapters change; save_model writes PEFT's adapter files,
which PeftModel.from_pretrained loads onto a fresh base with the trained logits.
TRAINRT_FALLBACK_POLICY is FALLBACK_DISABLE: a model that fell back to PyTorch fails.
"""

import pytest
import torch

import trainrt

peft = pytest.importorskip("peft")
pytest.importorskip("accelerate")

from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402
from test_hf_trainer import arguments, assert_close, assert_ran_in_engine, make_data, make_model  # noqa: E402

from trainrt.hf import RTTrainer, RTTrainingArguments  # noqa: E402

pytestmark = [pytest.mark.slow,  # two captures (train, eval) per route: ~20 s each on the 2-core machine
              pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TARGETS = ["c_attn", "c_proj", "c_fc"]


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def make_lora():
    model = make_model("gpt2")
    torch.manual_seed(1)  # the adapters' initialization
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0, fan_in_fan_out=True,
                             task_type="CAUSAL_LM", init_lora_weights=False)  # False: B random, not zero
    return peft.get_peft_model(model, config)


class GradientsAtStep(TrainerCallback):
    """Which parameters hold a gradient when the optimizer is about to step, per step."""

    def __init__(self):
        self.steps: list[dict[str, bool]] = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.steps.append({n: p.grad is not None for n, p in model.named_parameters()})


def train(trainer_cls, model, args):
    seen = GradientsAtStep()
    trainer = trainer_cls(model=model, args=args, train_dataset=make_data("gpt2", 16, 1),
                          eval_dataset=make_data("gpt2", 7, 2), callbacks=[seen])
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer, losses, trainer.evaluate()["eval_loss"], seen.steps


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The plain Trainer over the PeftModel: (losses, eval_loss)."""
    tmp = tmp_path_factory.mktemp("plain_lora")
    _, losses, eval_loss, _ = train(Trainer, make_lora(), arguments(TrainingArguments, tmp, optim="adamw_torch"))
    return losses, eval_loss


ROUTES = {
    "RTTrainer": lambda tmp: (RTTrainer, make_lora(), arguments(RTTrainingArguments, tmp)),
    "Trainer(RTModule)": lambda tmp: (Trainer, trainrt.RTModule(make_lora()),
                                      arguments(TrainingArguments, tmp, optim="adamw_torch")),
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_lora_trains_the_adapters_alone_as_the_plain_trainer_does(route, reference, tmp_path):
    trainer_cls, model, args = ROUTES[route](tmp_path)
    peft_model = model._module if isinstance(model, trainrt.RTModule) else model
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    trainer, losses, eval_loss, grads_seen = train(trainer_cls, model, args)
    assert type(trainer.model) is trainrt.RTModule and trainer.model._module is peft_model
    assert_ran_in_engine(trainer.model)
    ref_losses, ref_eval_loss = reference
    assert_close(losses, ref_losses)
    assert eval_loss == pytest.approx(ref_eval_loss, rel=1e-4)

    adapters = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert adapters and all("lora_" in n for n in adapters)
    assert len(adapters) == 2 * 4  # lora_A, lora_B on attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj (1 layer)
    assert len(grads_seen) == args.max_steps
    for step in grads_seen:  # RTModule's named_parameters are the PeftModel's, names included
        assert {n for n, has in step.items() if has} == adapters
    for n, p in peft_model.named_parameters():
        changed = not torch.equal(p.detach(), before[n])
        assert changed == (n in adapters), n

    saved = tmp_path / "adapter"
    trainer.save_model(str(saved))
    assert (saved / "adapter_config.json").is_file() and (saved / "adapter_model.safetensors").is_file()
    from safetensors.torch import load_file

    keys = set(load_file(str(saved / "adapter_model.safetensors")))
    assert keys and all("lora_" in k for k in keys)
    reloaded = peft.PeftModel.from_pretrained(make_model("gpt2"), str(saved)).eval()
    batch = torch.stack([r["input_ids"] for r in make_data("gpt2", 3, 4)])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=batch).logits, peft_model.eval()(input_ids=batch).logits,
                                   rtol=0, atol=0)
