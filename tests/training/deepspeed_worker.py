"""Run by test_engines.py in a fresh process: DeepSpeed ZeRO on CPU, one rank (gloo).

A process of its own, because a process group is process-global state. Prints one
JSON line of findings; the test asserts on them. Usage:
``deepspeed_worker.py STAGE DIR [OPTIMIZER]`` (``adamw``, the default, or ``sgd``).
"""

import json
import os
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import torch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(stage: int, workdir: Path, optimizer: str = "adamw") -> dict:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        DS_ACCELERATOR="cpu",
    )
    from slca.config.engine import EngineConfig
    from slca.training.engines import DeepSpeedEngine, deepspeed_config
    from slca.training.tiny import tiny_model, train_tokenizer

    tokenizer = train_tokenizer(["call the weather tool for Paris and summarise"] * 20, 300)
    config = EngineConfig(
        engine="deepspeed",
        zero_stage=stage,
        bf16=False,
        optim={"name": optimizer, "lr": 1e-2, "warmup_steps": 2},
    )
    ds_config = deepspeed_config(config)
    engine = DeepSpeedEngine(tiny_model(tokenizer, seed=0), config)
    ids = torch.randint(0, len(tokenizer), (2, 12), generator=torch.Generator().manual_seed(0))

    def loss_of(batch: torch.Tensor) -> torch.Tensor:
        return engine.model(input_ids=batch, labels=batch).loss

    before = {k: v.clone() for k, v in engine.state_dict_for_rollout().items()}
    # accumulation: two half batches, the caller scales each by 1/2
    engine.backward(loss_of(ids[:1]) / 2, boundary=False)
    engine.backward(loss_of(ids[1:]) / 2)
    grad_norm = engine.step()
    after = engine.state_dict_for_rollout()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    saved = {k: v.clone() for k, v in after.items()}
    lr_saved = engine.current_lr()

    target = engine.save(workdir / "ckpt", client_state={"step": 1})
    engine.backward(loss_of(ids))
    engine.step()
    moved = any(not torch.equal(saved[k], v) for k, v in engine.state_dict_for_rollout().items())
    from transformers import Qwen2ForCausalLM

    exported = Qwen2ForCausalLM.from_pretrained(target).state_dict()
    hf_export_matches = exported.keys() == saved.keys() and all(
        torch.equal(exported[k], saved[k].cpu()) for k in saved
    )
    client = engine.load(target)
    restored = all(torch.equal(saved[k], v) for k, v in engine.state_dict_for_rollout().items())
    lr_restored, steps_restored = engine.current_lr() == lr_saved, engine.steps

    # non-finite gradients: DeepSpeed's overflow check applies nothing and drops them
    engine.backward(loss_of(ids) * float("nan"))
    nan_norm = engine.step()
    nan_skipped = (
        all(torch.equal(saved[k], v) for k, v in engine.state_dict_for_rollout().items())
        and engine.current_lr() == lr_saved
        and engine.steps == 1
    )
    # the HF rollout engine on the engine's module (not its wrapper) is never synced
    from slca.generation.engines import HFEngine
    from slca.training.rl import Trainer

    hf = HFEngine(engine.module, tokenizer)
    hf.load_weights = lambda state: (_ for _ in ()).throw(AssertionError("synced"))
    from slca.config.train import TrainConfig
    from slca.simulator import Simulator

    trainer = Trainer(
        TrainConfig.model_validate({"algorithm": {"loss": {"kl_coef": 0}}}),
        tasks=[SimpleNamespace(id="t")],
        tokenizer=tokenizer,
        update=engine,
        rollout_engine=hf,
        simulator=Simulator(),
        checkpoint_dir=workdir / "unused",
    )
    trainer._sync_rollout_weights()
    engine.backward(loss_of(ids))  # and the next step is a normal one
    after_nan = engine.step()
    return {
        "optimizer_class": type(engine._ds.basic_optimizer).__name__,
        "optimizer_params": ds_config["optimizer"]["params"],
        "bf16": ds_config["bf16"]["enabled"],
        "grad_norm": grad_norm,
        "changed": len(changed),
        "params": len(before),
        "moved_after_save": moved,
        "restored": restored,
        "nan_norm": nan_norm,
        "nan_skipped": nan_skipped,
        "after_nan": after_nan,
        "hf_export_matches": hf_export_matches,
        "lr_restored": lr_restored,
        "steps": steps_restored,
        "steps_after_nan_and_one_more": engine.steps,
        "client_state": client,
        "files": sorted(p.name for p in target.iterdir()),
        "leftovers": sorted(p.name for p in workdir.iterdir() if p.name.startswith(".")),
    }


if __name__ == "__main__":
    result = main(int(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:])
    print("RESULT " + json.dumps(result))
