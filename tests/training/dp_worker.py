"""One rank of a data-parallel RL run on CPU, launched by ``torchrun`` from test_data_parallel.py.

Usage: ``torchrun --nproc_per_node N dp_worker.py SETUP WORKDIR ENGINE STAGE STEPS [resume]``
(ENGINE ``torch`` or ``deepspeed``; STAGE the ZeRO stage, ignored for torch). ``SETUP``
holds the initial model and tokenizer, written once by the test, so every process (and
the one-process reference, which calls :func:`run` in the test's own process) starts
from the same bytes. Rank 0 writes ``WORKDIR/result.json``; checkpoints land in
``WORKDIR/ckpt`` (every step), so a second launch with ``resume`` continues the run.
"""

import json
import os
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ (helpers)

from slca.config.train import TrainConfig  # noqa: E402
from slca.generation.engines import Generation  # noqa: E402

SCRIPT_CITY = "Paris"


def tasks():
    from slca.config.data import SynthParams
    from slca.data.synth import generate

    return [
        t
        for t in generate(SynthParams(n_tasks=40, domains=["weather"]), seed=2)
        if len(t.gold) == 1 and len(t.gold[0]) == 1
    ][:4]


def call(city):
    args = json.dumps({"name": "get_weather", "arguments": {"city": city}})
    return f"<tool_call>\n{args}\n</tool_call>"


class GroupScripted:
    """Answers turn n with ``script[n][k]``, k counting identical prompts in the call: the
    members of a group differ, and the answer does not depend on which other groups
    share the call (so one process and several give the same rollouts)."""

    name = "scripted"

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script

    def generate(self, prompts, params):
        seen = Counter()
        out = []
        for prompt in prompts:
            k = seen[tuple(prompt)]
            seen[tuple(prompt)] += 1
            turn = self.tokenizer.decode(prompt).count("<|im_start|>assistant") - 1
            options = self.script[min(turn, len(self.script) - 1)]
            text = options[k % len(options)]
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: params.max_new_tokens]
            ids.append(self.tokenizer.eos_token_id)
            out.append(Generation(ids, [-0.5] * len(ids), stopped=True))
        return out

    def load_weights(self, state_dict):
        pass


SCRIPT = [
    [call(SCRIPT_CITY), call("Atlantis"), "It is 21 degrees.", "<tool_call>{x"],
    ["It is 21 degrees in Paris.", "No idea, sorry."],
]


class Recorder:
    def __init__(self):
        self.metrics = []

    def log_metrics(self, metrics, step):
        self.metrics.append((step, metrics))

    def log_histograms(self, step, values):
        pass

    def log_checkpoint(self, path, step):
        pass


def config(engine: str, stage: int, steps: int) -> TrainConfig:
    settings = {"engine": engine, "optim": {"lr": 1e-3}}
    if engine == "deepspeed":
        settings.update(zero_stage=stage, bf16=False)
    return TrainConfig.model_validate(
        {
            "steps": steps,
            "checkpoint_every": 1,
            "histogram_every": 1,
            "rollout": {"tasks_per_step": 2, "group_size": 4, "max_new_tokens": 48},
            "update": {"micro_batch_size": 2},
            "algorithm": {"loss": {"kl_coef": 0.01}},
            "engine": settings,
        }
    )


def run(setup: Path, workdir: Path, engine: str, stage: int, steps: int, resume: bool) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slca.generation.engines import HFEngine
    from slca.simulator import Simulator
    from slca.training.engines import build_engine
    from slca.training.rl import Trainer

    tokenizer = AutoTokenizer.from_pretrained(setup)
    cfg = config(engine, stage, steps)
    update = build_engine(AutoModelForCausalLM.from_pretrained(setup), cfg.engine)
    reference = AutoModelForCausalLM.from_pretrained(setup).requires_grad_(False)
    recorder = Recorder() if update.is_main_process else None
    trainer = Trainer(
        cfg,
        tasks=tasks(),
        tokenizer=tokenizer,
        update=update,
        rollout_engine=GroupScripted(tokenizer, SCRIPT),
        simulator=Simulator(),
        checkpoint_dir=workdir / "ckpt",
        reference=reference,
        tracker=recorder,
    )
    # the HF engine on the (DDP/DeepSpeed-wrapped) engine's module: never synced
    shared = HFEngine(update.module, tokenizer)
    shared.load_weights = lambda state: (_ for _ in ()).throw(AssertionError("synced"))
    trainer.rollout_engine, kept = shared, trainer.rollout_engine
    trainer._sync_rollout_weights()
    trainer.rollout_engine = kept
    state = trainer.run(resume=resume)
    if not update.is_main_process:
        return {}
    return {
        "world_size": update.world_size,
        "device": str(update.device),
        "state": {"step": state.step, "tasks_drawn": state.tasks_drawn},
        "metrics": [
            (step, {k: v for k, v in m.items() if not k.startswith("perf/")})
            for step, m in recorder.metrics
        ],
    }


if __name__ == "__main__":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    torch.manual_seed(0)
    setup, workdir, engine, stage, steps = sys.argv[1:6]
    result = run(
        Path(setup), Path(workdir), engine, int(stage), int(steps), sys.argv[6:] == ["resume"]
    )
    if result:
        (Path(workdir) / "result.json").write_text(json.dumps(result))
