"""The small trainer world that tests/training/test_rl.py and test_policy_update.py share
(importable as ``trainer_world`` via pytest's ``pythonpath``): one-call weather tasks, a
tokenizer, a scripted rollout engine whose groups mix right and wrong policies, and
:func:`make`, a :class:`~slca.training.rl.Trainer` on a tiny model with a recording tracker."""

import json

from helpers import ScriptedEngine

from slca.config.data import SynthParams
from slca.config.engine import EngineConfig
from slca.config.train import TrainConfig
from slca.data.synth import generate
from slca.simulator import Simulator
from slca.training.engines import TorchEngine
from slca.training.rl import Trainer
from slca.training.tiny import tiny_model, train_tokenizer


def engine(model, lr=1e-3, **optim):
    return TorchEngine(model, EngineConfig(optim={"lr": lr, "weight_decay": 0.01, **optim}))


class Recorder:
    def __init__(self):
        self.metrics, self.histograms, self.checkpoints = [], [], []

    def log_metrics(self, metrics, step):
        self.metrics.append((step, metrics))

    def log_histograms(self, step, values):
        self.histograms.append((step, values))

    def log_checkpoint(self, path, step):
        self.checkpoints.append((step, path))


def build_world():
    """Six one-call weather tasks and a tokenizer trained on them."""
    tasks = [
        t
        for t in generate(SynthParams(n_tasks=40, domains=["weather"]), seed=2)
        if len(t.gold) == 1 and len(t.gold[0]) == 1
    ]
    tokenizer = train_tokenizer([m.content for t in tasks for m in t.messages] * 3, vocab_size=500)
    return tasks[:6], tokenizer


def call(city):
    args = json.dumps({"name": "get_weather", "arguments": {"city": city}})
    return f"<tool_call>\n{args}\n</tool_call>"


def script_for(task):
    city = task.gold[0][0].arguments["city"]
    temperature = task.facts[f"{city}.temperature"]
    # Four different policies in each group: right call, wrong city, no call, bad JSON.
    return [
        [call(city), call("Atlantis"), f"It is {temperature} degrees.", "<tool_call>{x"],
        [f"It is {temperature} degrees in {city}.", "No idea, sorry."],
    ]


def make(
    world,
    tmp_path,
    *,
    estimator="slca",
    seed=0,
    steps=2,
    model_seed=0,
    kl_coef=0.0,
    granularity="trajectory",
    script=None,
    summary_scorer=None,
    optim=None,
    **overrides,
):
    tasks, tokenizer = world
    config = TrainConfig.model_validate(
        {
            "seed": seed,
            "steps": steps,
            "checkpoint_every": 1,
            "histogram_every": 1,
            "rollout": {"tasks_per_step": 1, "group_size": 4, "max_new_tokens": 64, "max_turns": 2},
            "update": {"micro_batch_size": 2, "minibatches": 2},
            "algorithm": {
                "advantage": {"estimator": estimator, "granularity": granularity},
                "loss": {"kl_coef": kl_coef},
            },
            **overrides,
        }
    )
    model = tiny_model(tokenizer, seed=model_seed)
    recorder = Recorder()
    trainer = Trainer(
        config,
        tasks=tasks[:1],
        tokenizer=tokenizer,
        update=engine(model, **(optim or {})),
        reference=tiny_model(tokenizer, seed=model_seed).eval() if kl_coef else None,
        rollout_engine=ScriptedEngine(tokenizer, script or script_for(tasks[0])),
        simulator=Simulator(),
        checkpoint_dir=tmp_path / "ckpt",
        tracker=recorder,
        summary_scorer=summary_scorer,
    )
    return trainer, model, recorder
