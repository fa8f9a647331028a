"""Update engines: steps, clipping, schedule, atomic checkpoints and resume, DeepSpeed on CPU."""

import importlib.util
import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from transformers import Qwen2ForCausalLM

from slca.config.engine import DEEPSPEED_CONFIG_DIR, EngineConfig, OptimConfig
from slca.training import engines
from slca.training.engines import (
    TorchEngine,
    UpdateEngine,
    build_engine,
    explain_oom,
    lr_factor,
)
from slca.training.tiny import tiny_model, train_tokenizer

WORKER = Path(__file__).with_name("deepspeed_worker.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tokenizer():
    # the DeepSpeed worker builds the same tokenizer and batch
    return train_tokenizer(["call the weather tool for Paris and summarise"] * 20, 300)


@pytest.fixture
def batch(tokenizer):
    return torch.randint(0, len(tokenizer), (2, 12), generator=torch.Generator().manual_seed(0))


def make_engine(tokenizer, seed=0, **optim):
    optim = {"lr": 1e-2, "warmup_steps": 2, **optim}
    return TorchEngine(tiny_model(tokenizer, seed=seed), EngineConfig(optim=optim))


def lm_step(engine, batch):
    with engine.autocast():
        loss = engine.model(input_ids=batch, labels=batch).loss
    engine.backward(loss)
    return loss.item(), engine.step()


def snapshot(engine):
    return {k: v.clone() for k, v in engine.state_dict_for_rollout().items()}


def draws():
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def check_update_engine(engine: UpdateEngine, bare: torch.nn.Module, batch, tmp_path) -> None:
    """What the trainer relies on from any :class:`UpdateEngine`, member by member, as its
    docstrings promise (an ``isinstance`` check would only see that the names exist)."""
    assert engine.module is bare
    assert engine.device == next(bare.parameters()).device
    assert (engine.rank, engine.world_size, engine.is_main_process) == (0, 1, True)
    names = dict(bare.named_parameters())
    weights = {k: v.clone() for k, v in engine.state_dict_for_rollout().items()}
    assert set(names) <= set(weights) and all(torch.equal(weights[n], names[n]) for n in names)
    engine.eval()
    assert not bare.training
    with engine.autocast(), torch.no_grad():
        logits = engine.model(input_ids=batch).logits
    assert logits.shape[:2] == batch.shape
    engine.train()
    assert bare.training
    lr = engine.current_lr()
    assert lr > 0
    for boundary in (False, True):  # two micro-batches accumulate into one step
        with engine.micro_batch(boundary=boundary):
            loss = engine.model(input_ids=batch, labels=batch).loss
        engine.backward(loss, boundary=boundary)
    assert all(p.grad is not None for p in bare.parameters() if p.requires_grad)
    norm = engine.step()
    assert math.isfinite(norm) and norm > 0
    assert all(p.grad is None for p in bare.parameters())
    assert not torch.equal(
        engine.state_dict_for_rollout()[next(iter(names))], weights[next(iter(names))]
    )
    with engine.micro_batch():
        engine.backward(engine.model(input_ids=batch, labels=batch).loss)
    engine.zero_grad()
    assert all(p.grad is None for p in bare.parameters())
    saved = engine.save(tmp_path / "ckpt", {"step": 1})
    after_save = {k: v.clone() for k, v in engine.state_dict_for_rollout().items()}
    lm_step(engine, batch)
    assert engine.load(saved) == {"step": 1}
    restored = engine.state_dict_for_rollout()
    assert all(torch.equal(restored[k], v) for k, v in after_save.items())


def test_torch_engine_keeps_the_protocol_and_reduces_a_fixed_loss(tokenizer, batch, tmp_path):
    bare = tiny_model(tokenizer)
    engine = build_engine(bare, EngineConfig(optim={"lr": 1e-2}))
    assert type(engine) is TorchEngine
    check_update_engine(engine, bare, batch, tmp_path)
    engine = build_engine(tiny_model(tokenizer), EngineConfig(optim={"lr": 1e-2}))
    engine.train()
    losses = [lm_step(engine, batch)[0] for _ in range(6)]
    assert losses[-1] < losses[0] - 0.5
    assert engine.is_main_process


def test_step_returns_the_pre_clip_norm_and_clips(tokenizer, batch):
    engine = make_engine(tokenizer, max_grad_norm=0.1)
    loss = engine.model(input_ids=batch, labels=batch).loss * 100
    engine.backward(loss)
    expected = torch.linalg.vector_norm(
        torch.stack([p.grad.norm() for p in engine.model.parameters() if p.grad is not None])
    ).item()
    seen = []

    def spy(optimizer, args, kwargs):
        grads = [p.grad for p in engine.model.parameters() if p.grad is not None]
        seen.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())

    engine.optimizer.register_step_pre_hook(spy)
    norm = engine.step()
    assert norm == pytest.approx(expected, rel=1e-5) and norm > 0.1
    assert seen == [pytest.approx(0.1, rel=1e-4)]
    assert all(p.grad is None for p in engine.model.parameters())


def test_sgd_steps_by_lr_times_the_clipped_gradient(tokenizer, batch):
    engine = make_engine(tokenizer, name="sgd", lr=0.5, warmup_steps=0, max_grad_norm=0.05)
    assert type(engine.optimizer) is torch.optim.SGD
    before = {n: p.detach().clone() for n, p in engine.model.named_parameters()}
    engine.backward(engine.model(input_ids=batch, labels=batch).loss)
    grads = {n: p.grad.clone() for n, p in engine.model.named_parameters() if p.grad is not None}
    norm = engine.step()
    scale = min(1.0, 0.05 / norm)  # clipped: the step has norm lr * max_grad_norm
    for name, param in engine.model.named_parameters():
        expected = before[name] - 0.5 * scale * grads.get(name, torch.zeros_like(param))
        torch.testing.assert_close(param.detach(), expected, rtol=1e-4, atol=1e-6)
    moved = torch.linalg.vector_norm(
        torch.stack([(p.detach() - before[n]).norm() for n, p in engine.model.named_parameters()])
    )
    assert moved.item() == pytest.approx(0.5 * 0.05, rel=1e-3)


def test_a_step_with_non_finite_gradients_applies_nothing(tokenizer, batch):
    engine = make_engine(tokenizer)
    lm_step(engine, batch)
    before, lr = snapshot(engine), engine.current_lr()
    loss = engine.model(input_ids=batch, labels=batch).loss
    engine.backward(loss * float("nan"))
    assert math.isnan(engine.step())
    assert all(torch.equal(before[k], v) for k, v in engine.state_dict_for_rollout().items())
    assert engine.steps == 1 and engine.current_lr() == lr and engine.scheduler.last_epoch == 1
    assert all(p.grad is None for p in engine.model.parameters())
    assert math.isfinite(lm_step(engine, batch)[1]) and engine.steps == 2


def test_the_device_setting_is_checked_and_used(tokenizer):
    engine = TorchEngine(tiny_model(tokenizer), EngineConfig(device="cpu"))
    assert engine.device == torch.device("cpu") and engine.world_size == 1 and engine.rank == 0
    assert {p.device for p in engine.module.parameters()} == {torch.device("cpu")}
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"engine.device='cuda' but .* no CUDA device"):
            TorchEngine(tiny_model(tokenizer), EngineConfig(device="cuda"))
    with pytest.raises(ValidationError, match="not a torch device"):
        EngineConfig(device="gpu0")
    with pytest.raises(ValidationError, match="cpu or cuda"):
        EngineConfig(device="meta")
    with pytest.raises(ValidationError, match="device applies to engine 'torch' only"):
        EngineConfig(engine="deepspeed", device="cpu")


def test_lr_schedule_warms_up_linearly_then_holds_or_decays():
    constant = lr_factor(OptimConfig(lr=1.0, warmup_steps=4))
    assert [constant(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    cosine = lr_factor(
        OptimConfig(lr=1.0, warmup_steps=2, schedule="cosine", total_steps=12, min_lr_ratio=0.1)
    )
    assert cosine(1) == 1.0 and cosine(2) == 1.0
    assert cosine(7) == pytest.approx(0.55)
    assert cosine(12) == pytest.approx(0.1) and cosine(50) == pytest.approx(0.1)


def test_engine_lr_follows_the_schedule(tokenizer, batch):
    engine = make_engine(tokenizer, warmup_steps=4)
    lrs = []
    for _ in range(5):
        lrs.append(engine.current_lr())
        lm_step(engine, batch)
    assert lrs == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2])


def test_save_then_load_restores_everything_and_the_run_continues_identically(
    tokenizer, batch, tmp_path
):
    engine = make_engine(tokenizer)
    for _ in range(2):
        lm_step(engine, batch)
    torch.manual_seed(1234)
    random.seed(1234)
    np.random.seed(1234)
    target = engine.save(tmp_path / "step-2", client_state={"step": 2, "cursor": [3, 1]})
    saved, lr_saved, next_draws = snapshot(engine), engine.current_lr(), draws()
    lm_step(engine, batch)
    continued = snapshot(engine)

    fresh = make_engine(tokenizer, seed=7)
    assert not torch.equal(
        fresh.state_dict_for_rollout()["lm_head.weight"], saved["lm_head.weight"]
    )
    client = fresh.load(target)
    assert client == {"step": 2, "cursor": [3, 1]}
    assert all(torch.equal(saved[k], v) for k, v in fresh.state_dict_for_rollout().items())
    assert fresh.scheduler.last_epoch == engine.scheduler.last_epoch - 1 == 2
    assert fresh.current_lr() == lr_saved and fresh.steps == 2
    restored = fresh.optimizer.state_dict()["state"]
    assert restored[0]["step"].item() == 2 and restored[0]["exp_avg"].abs().sum() > 0
    assert draws() == next_draws
    lm_step(fresh, batch)
    assert all(torch.equal(continued[k], v) for k, v in fresh.state_dict_for_rollout().items())


def test_the_checkpoint_is_a_loadable_hf_model_matching_the_rollout_weights(
    tokenizer, batch, tmp_path
):
    engine = make_engine(tokenizer)
    lm_step(engine, batch)
    weights = engine.state_dict_for_rollout()
    assert weights.keys() == engine.model.state_dict().keys()
    assert all(torch.equal(weights[k], v) for k, v in engine.model.state_dict().items())
    target = engine.save(tmp_path / "ckpt")
    assert (target / "model.safetensors").is_file() and (target / "config.json").is_file()
    reloaded = Qwen2ForCausalLM.from_pretrained(target).state_dict()
    assert all(torch.equal(reloaded[k], weights[k]) for k in weights)


def test_a_crash_mid_save_leaves_the_previous_checkpoint_or_nothing(
    tokenizer, batch, tmp_path, monkeypatch
):
    engine = make_engine(tokenizer)
    lm_step(engine, batch)
    good = engine.save(tmp_path / "latest", client_state={"step": 1})
    at_good = snapshot(engine)
    lm_step(engine, batch)

    real_save = torch.save

    def dies_on_optimizer(obj, path, *args, **kwargs):
        if Path(path).name == "optimizer.pt":
            real_save(obj, path, *args, **kwargs)  # half the work is on disk ...
            raise KeyboardInterrupt("killed")  # ... when the process dies
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(engines.torch, "save", dies_on_optimizer)
    with pytest.raises(KeyboardInterrupt):
        engine.save(tmp_path / "latest", client_state={"step": 2})  # replacing it
    with pytest.raises(KeyboardInterrupt):
        engine.save(tmp_path / "new", client_state={"step": 2})  # a new one
    monkeypatch.undo()

    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]
    fresh = make_engine(tokenizer, seed=3)
    assert fresh.load(good) == {"step": 1}
    assert all(torch.equal(at_good[k], v) for k, v in fresh.state_dict_for_rollout().items())


def test_staging_left_by_a_kill_is_ignored_and_replaced(tokenizer, tmp_path):
    engine = make_engine(tokenizer)
    (tmp_path / ".ckpt.tmp").mkdir()
    (tmp_path / ".ckpt.tmp" / "optimizer.pt").write_bytes(b"half")
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        engine.load(tmp_path / ".ckpt.tmp")
    engine.save(tmp_path / "ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_gradient_checkpointing_gives_the_same_gradients(tokenizer, batch):
    norms = []
    for checkpointing in (False, True):
        config = EngineConfig(gradient_checkpointing=checkpointing, optim={"lr": 1e-2})
        engine = TorchEngine(tiny_model(tokenizer), config)
        engine.train()
        layers = [m for m in engine.model.modules() if hasattr(m, "gradient_checkpointing")]
        assert any(m.gradient_checkpointing for m in layers) == checkpointing
        norms.append(lm_step(engine, batch)[1])
    assert norms[0] == pytest.approx(norms[1], rel=1e-5)


def test_an_out_of_memory_error_names_the_micro_batch_setting():
    with pytest.raises(RuntimeError, match=r"train\.update\.micro_batch_size` \(now 8\)") as info:
        with explain_oom(8):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
    assert isinstance(info.value.__cause__, torch.cuda.OutOfMemoryError)
    # every key the hint names is a real setting: `-S <key>=...` would be accepted
    from slca.config.train import TrainConfig

    keys = re.findall(r"`(train\.[a-z_.]+)`", str(info.value))
    assert len(keys) == 3
    for key in keys:
        section = TrainConfig
        for part in key.split(".")[1:]:
            assert part in section.model_fields, key
            section = section.model_fields[part].annotation
    with pytest.raises(ValueError, match="unrelated"):
        with explain_oom(8):
            raise ValueError("unrelated")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"optim": {"lr": 0}}, "lr"),
        ({"optim": {"max_grad_norm": -1}}, "max_grad_norm"),
        ({"optim": {"warmup_steps": -1}}, "warmup_steps"),
        ({"optim": {"betas": [0.9, 1.0]}}, "beta"),
        ({"optim": {"schedule": "cosine"}}, "total_steps"),
        ({"optim": {"warmup_steps": 5, "total_steps": 3}}, "must not exceed"),
        ({"engine": "jax"}, "engine"),
        ({"engine": "deepspeed", "zero_stage": 4}, "zero_stage"),
        ({"zero_stage": 3}, "engine 'deepspeed' only"),
        ({"deepspeed_config": "configs/deepspeed/zero1.json"}, "engine 'deepspeed' only"),
        ({"optim": {"lr_rate": 1}}, "lr_rate"),
        ({"optim": {"name": "adam"}}, "name"),
        ({"optim": {"momentum": 0.9}}, "momentum .* applies to name 'sgd'"),
        ({"optim": {"name": "sgd", "momentum": 1.0}}, "momentum"),
    ],
)
def test_config_errors_name_the_key(settings, message):
    with pytest.raises(ValidationError, match=message):
        EngineConfig.model_validate(settings)


def test_deepspeed_builds_read_an_arch_list_without_arch_specific_suffixes(monkeypatch):
    from slca.training import deepspeed_engine as ds

    assert ds.arch_list_deepspeed_parses("9.0a") == "9.0"
    assert ds.arch_list_deepspeed_parses("8.0 9.0a;9.0;10.0f+PTX") == "8.0;9.0;10.0+PTX"
    assert ds.arch_list_deepspeed_parses("8.6;Hopper") == "8.6;Hopper"  # left to DeepSpeed
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    with ds._arch_list_for_deepspeed():
        assert os.environ["TORCH_CUDA_ARCH_LIST"] == "9.0"
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "9.0a"  # restored
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    with ds._arch_list_for_deepspeed():
        assert "TORCH_CUDA_ARCH_LIST" not in os.environ


def test_deepspeed_json_is_checked_when_the_config_loads(tmp_path):
    for stage in (1, 2, 3):
        config = EngineConfig(engine="deepspeed", zero_stage=stage)
        assert config.deepspeed_json_path == DEEPSPEED_CONFIG_DIR / f"zero{stage}.json"
    with pytest.raises(ValidationError, match="zero_optimization.stage is 1 but zero_stage is 2"):
        EngineConfig(
            engine="deepspeed", zero_stage=2, deepspeed_config=DEEPSPEED_CONFIG_DIR / "zero1.json"
        )
    owned = tmp_path / "ds.json"
    owned.write_text(json.dumps({"zero_optimization": {"stage": 1}, "fp16": {"enabled": True}}))
    with pytest.raises(ValidationError, match=r"\['fp16'\] are set by the engine"):
        EngineConfig(engine="deepspeed", deepspeed_config=owned)
    with pytest.raises(ValidationError, match="no such file"):
        EngineConfig(engine="deepspeed", deepspeed_config=tmp_path / "missing.json")


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not installed (make .venv/.installed installs it; see "
    "docs/decisions.md, 'Update engines')",
)
@pytest.mark.parametrize(("stage", "optimizer"), [(1, "adamw"), (3, "adamw"), (1, "sgd")])
def test_deepspeed_zero_on_cpu_steps_saves_and_loads(stage, optimizer, tokenizer, batch, tmp_path):
    extensions = tmp_path / "torch_extensions"  # where a JIT-compiled op would land
    env = dict(os.environ, PYTHONPATH=str(REPO), TORCH_EXTENSIONS_DIR=str(extensions))
    (tmp_path / "work").mkdir()
    run = subprocess.run(
        [sys.executable, str(WORKER), str(stage), str(tmp_path / "work"), optimizer],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-4000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    if optimizer == "sgd":
        assert result["optimizer_class"] == "SGD" and result["optimizer_params"]["momentum"] == 0
    else:
        assert result["optimizer_class"] == "AdamW" and result["optimizer_params"]["torch_adam"]
    assert result["bf16"] is False
    assert result["changed"] > 0.9 * result["params"]
    assert result["moved_after_save"] and result["restored"] and result["lr_restored"]
    assert result["hf_export_matches"]
    assert result["steps"] == 1 and result["client_state"] == {"step": 1}
    assert not math.isfinite(result["nan_norm"]) and result["nan_skipped"]
    assert math.isfinite(result["after_nan"]) and result["steps_after_nan_and_one_more"] == 2
    assert {"deepspeed", "model.safetensors", "engine.json", "rng_state_rank0.pt"} <= set(
        result["files"]
    )
    assert result["leftovers"] == []
    assert not extensions.exists(), "DeepSpeed compiled an op on CPU"
    # two accumulated half batches under DeepSpeed == one full batch under plain torch
    reference = make_engine(tokenizer, name=optimizer)
    assert result["grad_norm"] == pytest.approx(lm_step(reference, batch)[1], rel=1e-4)


# ---------------------------------------------------------------- issue 35: precision


def test_autocast_wraps_the_forward_only_and_backward_refuses_it(tokenizer, batch):
    """``micro_batch`` no longer enters autocast; the forward goes in ``autocast()``
    (bf16 here, on the CPU) and ``backward`` refuses to run inside it."""
    engine = TorchEngine(tiny_model(tokenizer), EngineConfig(bf16=True, optim={"lr": 1e-2}))
    with engine.micro_batch():
        assert not torch.is_autocast_enabled("cpu")
        with engine.autocast():
            logits = engine.model(input_ids=batch).logits
            loss = engine.model(input_ids=batch, labels=batch).loss
        with engine.autocast(), pytest.raises(RuntimeError, match="inside autocast"):
            engine.backward(loss)
        engine.backward(loss)  # the graph is intact: the refusal came before backward
    assert logits.dtype is torch.bfloat16
    assert all(p.grad is not None for p in engine.model.parameters() if p.requires_grad)


def test_the_default_forward_precision_is_the_measurement_rule(tokenizer, batch, monkeypatch):
    """``bf16: null`` follows :func:`slca.modeling.eval_dtype` (fp32 on the CPU)."""
    from slca import modeling

    def forward_dtype(engine):
        with engine.autocast(), torch.no_grad():
            return engine.model(input_ids=batch).logits.dtype

    assert forward_dtype(make_engine(tokenizer)) is torch.float32
    monkeypatch.setattr(modeling, "eval_dtype", lambda device: torch.bfloat16)
    assert forward_dtype(make_engine(tokenizer)) is torch.bfloat16
