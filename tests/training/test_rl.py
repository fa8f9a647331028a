import math

import pytest
import torch
from helpers import DESIGN_METRICS, ScriptedEngine
from trainer_world import build_world, call, engine, make

from slca.config.engine import EngineConfig
from slca.config.train import TrainConfig
from slca.generation.engines import HFEngine
from slca.simulator import Simulator
from slca.training.checkpoints import latest_checkpoint
from slca.training.engines import TorchEngine, load_hf_weights
from slca.training.rl import Trainer, TrainingDiverged
from slca.training.tiny import tiny_model


@pytest.fixture(scope="module")
def world():
    return build_world()


def test_rl_steps_change_the_policy_and_report_every_design_metric(world, tmp_path):
    trainer, model, recorder = make(world, tmp_path, kl_coef=0.01)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = trainer.run()
    assert state.step == 2 and state.tasks_drawn == 2
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    (_, first), (_, second) = recorder.metrics
    assert set(DESIGN_METRICS) <= set(first)
    learning = ("rollout/response_tokens_mean", "rollout/response_tokens_max", "actor/lr")
    parts = ("reward/format", "reward/name", "reward/key", "reward/value", "reward/parallel")
    assert set(learning + parts + ("actor/rollout_logprob_diff",)) <= set(first)
    assert first["actor/lr"] == pytest.approx(1e-3)
    # the scripted engine reports -0.5 for every token; the model disagrees
    assert first["actor/rollout_logprob_diff"] > 0.1
    assert all(math.isfinite(v) for v in first.values())
    assert first["actor/grad_norm"] > 0 and first["adv/zero_group_frac"] == 0.0
    assert -1.0 <= first["actor/grad_cos_tool_sum"] <= 1.0
    step, histograms = recorder.histograms[0]
    assert step == 1 and set(histograms) == {"tool", "summary"}
    assert histograms["tool"].size > 0
    assert [s for s, _ in recorder.checkpoints] == [1, 2]
    assert latest_checkpoint(tmp_path / "ckpt").name == "step_000002"


def test_switching_the_estimator_changes_only_the_advantages(world, tmp_path):
    runs = {}
    for name in ("grpo", "slca"):
        trainer, model, recorder = make(world, tmp_path / name, estimator=name, steps=1)
        trainer.run()
        runs[name] = (recorder.metrics[0][1], model.state_dict())
    (grpo, grpo_params), (slca, slca_params) = runs["grpo"], runs["slca"]
    for key in (
        "reward/tool",
        "reward/sum",
        "rollout/tool_calls_per_task",
        "rollout/policy_tokens",
    ):
        assert grpo[key] == slca[key]
    assert grpo["adv/tool_std"] != slca["adv/tool_std"]
    assert any(not torch.equal(grpo_params[k], slca_params[k]) for k in grpo_params)


def test_same_seed_same_metrics_and_resume_continues_exactly(world, tmp_path):
    straight, _, rec_a = make(world, tmp_path / "a", steps=3)
    straight.run()
    again, _, rec_b = make(world, tmp_path / "b", steps=3)
    again.run()

    def untimed(recorder):  # wall-clock metrics differ run to run by nature
        return [
            {k: v for k, v in m.items() if not k.startswith("perf/") and k != "sim/latency_ms"}
            for _, m in recorder.metrics
        ]

    assert untimed(rec_a) == untimed(rec_b)
    # Interrupted after 2 steps, resumed by a new trainer (different initial weights):
    # weights, optimizer state and data cursor come back exactly as the straight run had
    # them after step 2, and step 3 then reports the same figures.
    first, _, _ = make(world, tmp_path / "c", steps=2)
    first.run()
    resumed, model_c, rec_c = make(world, tmp_path / "c", steps=3, model_seed=99)
    assert resumed.restore()
    straight_2 = tmp_path / "a/ckpt/step_000002"
    reference = tiny_model(world[1], seed=5)
    load_hf_weights(reference, straight_2)
    for key, value in reference.state_dict().items():
        assert torch.equal(model_c.state_dict()[key], value)
    saved = torch.load(straight_2 / "optimizer.pt", weights_only=True)["state"]
    restored = resumed.update.optimizer.state_dict()["state"]
    for index, entry in saved.items():
        assert all(torch.equal(restored[index][k], v) for k, v in entry.items())
    assert (resumed.state.step, resumed.state.tasks_drawn) == (2, 2)
    assert resumed.run().step == 3
    assert [s for s, _ in rec_c.metrics] == [3]  # nothing logged twice
    straight_3, resumed_3 = rec_a.metrics[2][1], rec_c.metrics[0][1]
    for key in ("reward/tool", "adv/tool_std", "actor/pg_loss", "actor/grad_norm"):
        assert resumed_3[key] == pytest.approx(straight_3[key], rel=1e-4)


def test_non_finite_losses_are_skipped_then_stop_the_run_with_checkpoints_intact(world, tmp_path):
    trainer, model, recorder = make(world, tmp_path, steps=3, max_bad_steps=2)
    trainer.config = trainer.config.model_copy(update={"steps": 1})
    trainer.run()  # a good step and its checkpoint
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    trainer.config = trainer.config.model_copy(update={"steps": 3})
    with pytest.raises(TrainingDiverged, match="2 consecutive non-finite losses"):
        trainer.run()
    assert trainer.state.skipped_steps == 2
    assert latest_checkpoint(tmp_path / "ckpt").name == "step_000001"


def test_kl_without_a_reference_model_is_a_config_error(world, tmp_path):
    tasks, tokenizer = world
    config = TrainConfig.model_validate({"algorithm": {"loss": {"kl_coef": 0.1}}})
    model = tiny_model(tokenizer)
    with pytest.raises(ValueError, match="needs a frozen reference"):
        Trainer(
            config,
            tasks=tasks,
            tokenizer=tokenizer,
            update=engine(model),
            rollout_engine=ScriptedEngine(tokenizer, ["x"]),
            simulator=Simulator(),
            checkpoint_dir=tmp_path,
        )


def test_per_call_granularity_reaches_the_estimator(world, tmp_path):
    """A rollout with a right and a wrong call block: per-call credit gives the two
    blocks different tool advantages, the trajectory level gives them one."""
    tasks, _ = world
    city = tasks[0].gold[0][0].arguments["city"]
    both = call(city) + "\n" + call("Atlantis")
    script = [[both, call(city), call("Atlantis"), both], ["Done."]]
    tool = {}
    for granularity in ("trajectory", "per_call"):
        trainer, _, recorder = make(
            world, tmp_path / granularity, steps=1, granularity=granularity, script=script
        )
        trainer.run()
        tool[granularity] = recorder.histograms[0][1]["tool"]
    assert len(set(tool["trajectory"].round(6))) < len(set(tool["per_call"].round(6)))


def test_validation_scores_held_out_tasks_when_due_and_leaves_training_alone(world, tmp_path):
    tasks, _ = world
    plain, _, rec_plain = make(world, tmp_path / "plain", steps=3)
    plain.run()
    validated, _, rec_val = make(world, tmp_path / "val", steps=3, validation={"every": 2})
    # the training task under another id, as a val task is: the simulator caches answers
    # per task and group, and a cached answer comes back with its keys sorted, so
    # validating the training task itself would change step 1's tool responses
    validated.validation_tasks = [tasks[0].model_copy(update={"id": "val-" + tasks[0].id})]
    validated.run()
    logged = {step: m for step, m in rec_val.metrics}
    # step 0 (before any update), every 2nd step, and the last
    assert [s for s, m in rec_val.metrics if "val/success_at_0.9" in m] == [0, 2, 3]
    # the scripted policy's greedy answer (position 0 of each turn) is the right call and
    # the right figure: full marks, scored against gold like evaluate
    assert logged[2]["val/success_at_0.9"] == 1.0 and logged[2]["val/tasks"] == 1.0
    assert logged[3]["val/redundant_calls_per_task"] == 0.0
    trained = [(s, m) for s, m in rec_val.metrics if s > 0]
    for (_, a), (_, b) in zip(rec_plain.metrics, trained, strict=True):
        for key in ("reward/tool", "adv/tool_std", "actor/pg_loss", "actor/grad_norm"):
            assert a[key] == b[key], key


def test_validation_every_0_is_off_and_never_on_the_train_split(world, tmp_path):
    trainer, _, recorder = make(world, tmp_path, steps=1, validation={"every": 0})
    trainer.validation_tasks = world[0][:1]
    trainer.run()
    assert [s for s, _ in recorder.metrics] == [1]  # no step 0 either
    assert not any(k.startswith("val/") for k in recorder.metrics[0][1])
    with pytest.raises(ValueError, match="not held out"):
        TrainConfig.model_validate({"validation": {"every": 1, "split": "train"}})


def test_step_0_validates_the_starting_policy_once_and_a_resume_skips_it(
    world, tmp_path, monkeypatch
):
    """Step 0 is validated before the first update, with the starting weights, and logged
    alone; a run restored from a checkpoint does not validate or log step 0 again."""
    trainer, model, recorder = make(world, tmp_path, steps=1, validation={"every": 4})
    trainer.validation_tasks = world[0][:1]
    start = {k: v.clone() for k, v in model.state_dict().items()}
    seen = []
    original = Trainer.validate

    def validate(self):
        seen.append(all(torch.equal(start[k], v) for k, v in model.state_dict().items()))
        return original(self)

    monkeypatch.setattr(Trainer, "validate", validate)
    trainer.run()
    assert seen == [True, False]  # step 0 with the starting weights; step 1 (the last)
    (zero, first), (one, _) = recorder.metrics
    assert (zero, one) == (0, 1)
    assert {k for k in first if not k.startswith("val/")} == {"perf/validate_s"}
    assert first["val/success_at_0.9"] == 1.0 and first["val/tasks"] == 1.0
    resumed, _, rec_resumed = make(world, tmp_path, steps=2, validation={"every": 4})
    resumed.validation_tasks = world[0][:1]
    assert resumed.restore()
    resumed.begin()
    assert rec_resumed.metrics == []
    resumed.run()
    assert [s for s, _ in rec_resumed.metrics] == [2]


def test_reference_profile_reaches_segments_estimator_and_loss(world, tmp_path, monkeypatch):
    """Under ``profile: reference`` the trainer hands the estimator mask-run heads, the
    reference switches and the guard flags, and the loss its dual clip."""
    import slca.training.rl as rl
    from slca.segments import mask_run_masks

    seen = []

    def spy(name, **kwargs):
        seen.append((name, kwargs))
        return compute(name, **kwargs)

    compute = rl.compute_advantages
    monkeypatch.setattr(rl, "compute_advantages", spy)
    trainer, _, recorder = make(
        world, tmp_path, steps=1, algorithm={"profile": "reference", "loss": {"kl_coef": 0.0}}
    )
    assert trainer.config.rewards.mode == "reference"
    trainer.run()
    (name, kwargs), metrics = seen[0], recorder.metrics[0][1]
    assert name == "slca"
    assert (kwargs["numerics"], kwargs["singleton"], kwargs["weight_penalty"]) == (
        "float32",
        "raw",
        False,
    )
    masks = kwargs["head_masks"]
    runs = mask_run_masks(masks["tool"] | masks["summary"])
    assert all(torch.equal(masks[h], runs[h]) for h in ("tool", "summary"))
    # The script's "no call" rollout answers directly: under mask runs it has no tool head.
    assert (~masks["tool"].any(dim=1)).any()
    assert kwargs["guarded"].dtype == torch.bool and kwargs["guarded"].any()
    assert "actor/clipfrac_lower" in metrics and math.isfinite(metrics["actor/pg_loss"])


def test_bf16_runs_the_policy_and_reference_forwards_in_bf16_on_cpu(world, tmp_path):
    """``train.engine.bf16`` reaches every forward of the update (autocast): the logits
    of the policy and of the frozen reference come out in bf16 with it, fp32 without."""
    seen = {}
    for bf16 in (False, True):
        trainer, model, _ = make(world, tmp_path / str(bf16), steps=1, kl_coef=0.01)
        trainer.update = TorchEngine(
            model, EngineConfig(bf16=bf16, optim={"lr": 1e-3, "weight_decay": 0.01})
        )
        dtypes = {"policy": set(), "reference": set()}
        for name, module in (("policy", model), ("reference", trainer.reference)):
            module.lm_head.register_forward_hook(
                lambda _m, _i, out, seen=dtypes[name]: seen.add(out.dtype)
            )
        trainer.run()
        seen[bf16] = dtypes
    assert seen[False] == {"policy": {torch.float32}, "reference": {torch.float32}}
    assert seen[True] == {"policy": {torch.bfloat16}, "reference": {torch.bfloat16}}


def test_the_reference_moves_to_the_policy_device_and_dtype(world, tmp_path):
    trainer, model, _ = make(world, tmp_path, steps=1, kl_coef=0.01)
    assert trainer.update.device == torch.device("cpu")
    reference = tiny_model(world[1], seed=0).to(torch.bfloat16)
    again = Trainer(
        trainer.config,
        tasks=world[0][:1],
        tokenizer=world[1],
        update=trainer.update,
        reference=reference,
        rollout_engine=trainer.rollout_engine,
        simulator=Simulator(),
        checkpoint_dir=tmp_path / "again",
    )
    assert {p.dtype for p in again.reference.parameters()} == {torch.float32}
    assert not again.reference.training


def test_an_engine_sharing_the_module_is_never_synced_a_copy_is(world, tmp_path, monkeypatch):
    tasks, tokenizer = world
    short = {"tasks_per_step": 1, "group_size": 4, "max_new_tokens": 8, "max_turns": 1}
    trainer, model, _ = make(world, tmp_path / "shared", steps=2, rollout=short)
    shared = HFEngine(trainer.update.module, tokenizer, batch_size=8)
    trainer.rollout_engine = shared
    monkeypatch.setattr(shared, "load_weights", lambda state: pytest.fail("synced"))
    trainer.run()

    trainer, model, _ = make(world, tmp_path / "copy", steps=2, rollout=short)
    copy = HFEngine(tiny_model(tokenizer, seed=5), tokenizer, shares_module=False)
    trainer.rollout_engine = copy
    synced = []
    real = copy.load_weights
    monkeypatch.setattr(copy, "load_weights", lambda state: synced.append(1) or real(state))
    trainer.run()
    assert len(synced) == 2  # once before each step's rollouts
    # the copy holds the weights it sampled step 2 with: the policy after step 1
    after_1 = tiny_model(tokenizer, seed=9)
    load_hf_weights(after_1, tmp_path / "copy/ckpt/step_000001")
    assert all(torch.equal(v, copy.model.state_dict()[k]) for k, v in after_1.state_dict().items())

    with pytest.raises(ValueError, match="declares shares_module but does not generate"):
        Trainer(
            trainer.config,
            tasks=tasks,
            tokenizer=tokenizer,
            update=trainer.update,
            rollout_engine=HFEngine(tiny_model(tokenizer), tokenizer),  # another model
            simulator=Simulator(),
            checkpoint_dir=tmp_path / "x",
        )


def test_the_summary_scorer_is_built_once_for_every_step_and_validation(
    world, tmp_path, monkeypatch
):
    import slca.rewards.preference as preference

    built = []
    original = preference.GroundedScorer.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(preference.GroundedScorer, "__init__", counting)
    trainer, _, recorder = make(world, tmp_path, steps=3, validation={"every": 1})
    trainer.validation_tasks = world[0][:1]
    trainer.run()
    assert [s for s, m in recorder.metrics if "val/summary" in m] == [0, 1, 2, 3]
    assert len(built) == 1 and built[0] is trainer.summary_scorer


def test_validation_scores_with_the_run_summary_scorer_and_reward_settings(world, tmp_path):
    """The scripted greedy answer is the right call, then "It is <t> degrees in <city>.":
    the run's marker scorer decides val/summary, the run's process weights val/process."""
    figures = {}
    for text in ("degrees in", "no such phrase"):
        trainer, _, recorder = make(
            world,
            tmp_path / text.replace(" ", "_"),
            steps=1,
            validation={"every": 1},
            rewards={
                "summary": {"name": "marker", "marker": {"text": text}},
                "process": {"format": 1.0, "name": 0, "key": 0, "value": 0, "parallel": 0},
            },
        )
        trainer.validation_tasks = world[0][:1]
        trainer.run()
        figures[text] = recorder.metrics[-1][1]  # step 1, after the update
    assert figures["degrees in"]["val/summary"] == 1.0
    assert figures["no such phrase"]["val/summary"] == 0.0
    assert figures["no such phrase"]["val/process"] == figures["no such phrase"]["val/format"]


def test_validation_stays_against_gold_when_the_run_rewards_execution(world, tmp_path):
    trainer, _, recorder = make(
        world, tmp_path, steps=1, validation={"every": 1}, rewards={"mode": "execution"}
    )
    trainer.validation_tasks = world[0][:1]
    trainer.run()
    assert recorder.metrics[-1][1]["val/success_at_0.9"] == 1.0


def test_a_judge_without_its_engine_is_refused_when_the_trainer_is_built(world, tmp_path):
    with pytest.raises(ValueError, match="build_trainer"):
        make(world, tmp_path, rewards={"summary": {"name": "judge", "judge": {"model": "x"}}})


def test_a_judge_on_a_local_tiny_model_scores_from_step_1(world, tmp_path):
    from slca.rewards.judge_engine import build_scorer

    tasks, tokenizer = world
    judge_dir = tmp_path / "judge"
    tiny_model(tokenizer, seed=3).save_pretrained(judge_dir)
    tokenizer.save_pretrained(judge_dir)
    summary = {"name": "judge", "judge": {"model": str(judge_dir), "max_new_tokens": 6}}
    config = TrainConfig.model_validate({"rewards": {"summary": summary}})
    scorer = build_scorer(config.rewards.summary, where="train.rewards.summary")
    trainer, _, _ = make(
        world, tmp_path / "run", steps=1, rewards={"summary": summary}, summary_scorer=scorer
    )
    metrics = trainer.train_step()
    # the group's two summaries after the right call were rated by the tiny judge (which
    # cannot rate: each reply falls back to the failure score), none failed to generate
    assert metrics["judge/calls"] >= 1 and metrics["judge/engine_errors"] == 0
    assert metrics["judge/failures"] == metrics["judge/calls"]


def test_every_phase_is_timed_in_the_step_metrics(world, tmp_path):
    from slca.training.rl import PHASES

    trainer, _, recorder = make(world, tmp_path, steps=2, validation={"every": 2})
    trainer.validation_tasks = world[0][:1]
    trainer.run()
    (zero, validated), *steps = recorder.metrics
    assert zero == 0 and validated["perf/validate_s"] > 0  # step 0 times validation only
    for step, m in steps:
        assert all(m[f"perf/{p}_s"] > 0 for p in PHASES), m
        assert m["perf/backward_s"] + m["perf/optimizer_s"] <= m["perf/update_s"]
        parts = sum(m[f"perf/{p}_s"] for p in ("rollout", "score", "logprobs", "update"))
        assert parts <= m["perf/step_s"]
        assert ("perf/validate_s" in m) == (step == 2)


# ---------------------------------------------------------------- issue 35: precision


class PrecisionSpy(ScriptedEngine):
    """A scripted policy that shares the update's module (so training samples in the
    engine's autocast) and records the autocast state of every generate call."""

    def __init__(self, tokenizer, script, model):
        super().__init__(tokenizer, script)
        self.shares_module, self.model, self.seen = True, model, []

    def generate(self, prompts, params):
        on = torch.is_autocast_enabled("cpu")
        phase = "validation" if params.temperature == 0.0 else "training"
        self.seen.append((phase, torch.get_autocast_dtype("cpu") if on else torch.float32))
        return super().generate(prompts, params)


@pytest.mark.parametrize("engine_bf16, rule", [(True, torch.float32), (False, torch.bfloat16)])
def test_validation_runs_in_the_measurement_precision_not_the_training_one(
    world, tmp_path, monkeypatch, engine_bf16, rule
):
    """Validation asks :func:`slca.modeling.eval_dtype` (as evaluate and headroom do);
    training samples in the update engine's precision (``train.engine.bf16``)."""
    from slca import modeling

    monkeypatch.setattr(modeling, "eval_dtype", lambda device: rule)
    tasks, tokenizer = world
    trainer, model, _ = make(world, tmp_path, steps=1)
    trainer.update = TorchEngine(model, EngineConfig(bf16=engine_bf16, optim={"lr": 1e-3}))
    trainer.rollout_engine = spy = PrecisionSpy(tokenizer, trainer.rollout_engine.script, model)
    trainer.validation_tasks = [tasks[0].model_copy(update={"id": "val-" + tasks[0].id})]
    trainer.sample()  # a step's rollouts, as run() samples them
    trainer.validate()
    training = torch.bfloat16 if engine_bf16 else torch.float32
    assert {p for p, _ in spy.seen} == {"validation", "training"}
    assert all(d is (rule if p == "validation" else training) for p, d in spy.seen)


def test_validation_of_a_real_policy_computes_in_the_rule_s_dtype(world, tmp_path, monkeypatch):
    """Through ``HFEngine`` on the tiny policy: the rule forced to bf16 on the CPU makes
    validation's logits bf16; the CPU rule (fp32) keeps them fp32."""
    from slca import modeling

    tasks, tokenizer = world
    short = {"tasks_per_step": 1, "group_size": 2, "max_new_tokens": 4, "max_turns": 1}
    trainer, model, _ = make(world, tmp_path, steps=1, rollout=short)
    trainer.rollout_engine = HFEngine(model, tokenizer, batch_size=1)
    trainer.validation_tasks = tasks[:1]
    logits = []
    model.lm_head.register_forward_hook(lambda _m, _i, out: logits.append(out.dtype))
    trainer.validate()
    assert set(logits) == {torch.float32}
    logits.clear()
    monkeypatch.setattr(modeling, "eval_dtype", lambda device: torch.bfloat16)
    trainer.validate()
    assert logits and set(logits) == {torch.bfloat16}
