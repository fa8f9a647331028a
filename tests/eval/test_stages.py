"""The evaluation step on the tiny pipeline: report files, MLflow, the report CLI."""

import json

import pytest
from helpers import tiny_params
from mlflow.tracking import MlflowClient

from slca.config.data import PrepareParams
from slca.config.evaluate import EvaluateParams
from slca.config.steps import BaseModelParams, SFTParams
from slca.config.train import TrainConfig
from slca.data import io
from slca.data.prepare import prepare
from slca.eval import report as report_module
from slca.eval.stages import (
    draw,
    evaluate,
    main,
    transcript,
)
from slca.eval.value_probe import value_probe_metrics, value_probe_tasks
from slca.grammar import parse_turn
from slca.rollout.types import ExecutedCall, Rollout, Turn
from slca.tracking import RUN_FILE, experiment_runs, read_inputs
from slca.training.session import run_train
from slca.training.stages import build_base_model, run_sft


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    params = tiny_params(root)
    prepare(PrepareParams(**params["prepare"]))
    build_base_model(BaseModelParams(**params["base_model"]))
    run_sft(SFTParams(**params["sft"]))
    config = TrainConfig.model_validate(
        {
            **params["train"],
            "estimator": "grpo",
            "curve_path": str(root / "curves/grpo.csv"),
            "validation": {"every": 1, "max_tasks": 2},  # the report's learning curves
        }
    )
    run_id = run_train(config)
    return root, params, run_id


def test_draw_is_a_seeded_subset_independent_of_order(trained):
    root, _, _ = trained
    tasks = io.read_dataset(root / "data/tasks", ["test"])
    n = len(tasks) - 1
    first = draw(tasks, n, seed=1)
    assert [t.id for t in draw(list(reversed(tasks)), n, seed=1)] == [t.id for t in first]
    assert len(first) == n and draw(tasks, None, 0) == sorted(tasks, key=lambda t: t.id)


def test_train_writes_run_file_and_curves(trained):
    root, _, run_id = trained
    assert json.loads((root / "models/rl" / RUN_FILE).read_text())["run_id"] == run_id
    rows = (root / "curves/grpo.csv").read_text().splitlines()
    assert rows[0].startswith("step,reward/total,reward/tool")
    assert [r.split(",")[0] for r in rows[1:]] == ["0", "1", "2"]  # 0: validation only


def test_evaluate_writes_reports_and_logs_into_the_training_run(trained):
    root, params, run_id = trained
    settings = {
        **params["evaluate"],
        "model_dir": str(root / "models/rl"),
        "report_path": str(root / "reports/eval/rl.json"),
    }
    metrics = evaluate(EvaluateParams.model_validate(settings))
    saved = json.loads((root / "reports/eval/rl.json").read_text())
    tests = len(io.read_dataset(root / "data/tasks", ["test"]))
    assert saved == metrics and saved["in_domain/tasks"] + saved["in_domain/too_long"] == tests
    lines = (root / "reports/eval/rl.tasks.jsonl").read_text().splitlines()
    assert len(lines) == tests  # one line per task drawn, run or too long
    first = json.loads(lines[0])
    assert {"task_id", "process", "answer", "turns"} <= set(first)
    assert first["turns"]
    assert all({"text", "calls", "call_errors"} <= set(t) for t in first["turns"])
    (trained_run,) = [r for r in experiment_runs(root / "mlflow") if r.run_id == run_id]
    assert trained_run.metrics["eval/in_domain/process"] == metrics["in_domain/process"]
    # the splits it read join the training run's (train, and val for its validation)
    client = MlflowClient(f"sqlite:///{root / 'mlflow/mlflow.db'}")
    contexts = {d["name"]: d["context"] for d in read_inputs(client.get_run(run_id).inputs)}
    assert contexts == {"tasks/train": "training", "tasks/val": "validation", "tasks/test": "test"}
    # the value probe on the val split's synth tasks, reported and logged as the rest
    probe = {k: v for k, v in metrics.items() if k.startswith("value_probe/")}
    assert set(probe) == {
        "value_probe/value_accuracy",
        "value_probe/first_token_accuracy",
        "value_probe/later_token_accuracy",
        "value_probe/values",
    }
    assert probe["value_probe/values"] > 0
    assert all(0.0 <= probe[k] <= 1.0 for k in probe if k != "value_probe/values")
    for key, value in probe.items():
        assert trained_run.metrics[f"eval/{key}"] == value


def test_value_probe_tasks_are_synth_val_tasks_capped_0_skipping(trained):
    root, params, _ = trained
    base = EvaluateParams.model_validate(params["evaluate"])
    pool = [t for t in io.read_dataset(root / "data/tasks", ["val"]) if t.source == "synth"]
    assert pool
    every = value_probe_tasks(base.model_copy(update={"value_probe_tasks": None}))
    assert [t.id for t in every] == sorted(t.id for t in pool)
    capped = value_probe_tasks(base.model_copy(update={"value_probe_tasks": 1}))
    assert len(capped) == 1 and capped[0].split == "val"
    skipped = base.model_copy(update={"value_probe_tasks": 0})
    assert value_probe_tasks(skipped) == []
    # nothing to probe: no figure, and no model is needed (none is given)
    assert value_probe_metrics(skipped, None, None, "cpu") == {}
    empty = base.model_copy(update={"in_dir": str(root / "no-such-dir")})
    assert value_probe_metrics(empty, None, None, "cpu") == {}


def test_evaluate_loads_fp32_and_measures_in_the_rule_s_precision(trained, tmp_path, monkeypatch):
    """evaluate asks :func:`slca.modeling.eval_dtype`, as validation and headroom do: fp32
    weights, and the rollouts and the value probe in bf16 autocast when the rule says
    bf16 (forced here on the CPU; the CPU rule itself is fp32, as the tests above run)."""
    import torch

    from slca import modeling
    from slca.eval import value_probe
    from slca.rollout import loop

    root, params, _ = trained
    loaded, logits, autocast = [], set(), {}
    real_load, real_probe, real_rollouts = (
        modeling.load_causal_lm,
        value_probe.value_probe,
        loop.run_rollouts,
    )

    def load(source, **kwargs):
        loaded.append(kwargs.get("dtype"))
        model, tokenizer = real_load(source, **kwargs)
        model.lm_head.register_forward_hook(lambda _m, _i, out: logits.add(out.dtype))
        return model, tokenizer

    def spied(name, real):
        def call(*args, **kwargs):
            autocast.setdefault(name, set()).add(torch.is_autocast_enabled("cpu"))
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(modeling, "load_causal_lm", load)
    monkeypatch.setattr(value_probe, "value_probe", spied("probe", real_probe))
    monkeypatch.setattr(loop, "run_rollouts", spied("rollouts", real_rollouts))
    monkeypatch.setattr(modeling, "eval_dtype", lambda device: torch.bfloat16)
    settings = {
        **params["evaluate"],
        "in_domain": {"max_tasks": 2},
        "value_probe_tasks": 1,
        "report_path": str(tmp_path / "bf16.json"),
        "tracking_dir": None,
    }
    evaluate(EvaluateParams.model_validate(settings))
    assert loaded == ["float32"]
    assert autocast == {"probe": {True}, "rollouts": {True}}
    assert logits == {torch.bfloat16}


def test_evaluate_scores_summaries_with_a_judge_on_its_own_engine(trained, tmp_path):
    """evaluate.rewards.summary.name=judge: evaluation builds the judge's local engine as
    training does (slca.rewards.judge_engine), once, and reports its counters."""
    root, params, _ = trained
    judge = {"model": str(root / "models/base"), "max_new_tokens": 4}
    settings = {
        **params["evaluate"],
        "model_dir": str(root / "models/rl"),
        "report_path": str(tmp_path / "judged.json"),
        "tracking_dir": None,
        "rewards": {"mode": "process", "summary": {"name": "judge", "judge": judge}},
    }
    metrics = evaluate(EvaluateParams.model_validate(settings))
    lines = [json.loads(x) for x in (tmp_path / "judged.tasks.jsonl").read_text().splitlines()]
    answered = [line for line in lines if line["answer"].strip()]
    assert metrics["in_domain/judge/engine_errors"] == 0
    # at most one rating per answer (the omission guard spares some from being asked)
    assert metrics["in_domain/judge/calls"] <= len(answered)
    # the tiny judge cannot rate: each rating falls back to the failure score
    assert metrics["in_domain/judge/failures"] == metrics["in_domain/judge/calls"]
    settings["rewards"]["summary"]["judge"] = {"model": str(tmp_path / "absent")}
    with pytest.raises((OSError, ValueError), match="absent"):
        evaluate(EvaluateParams.model_validate(settings))


def test_the_sft_model_gets_its_own_run_and_the_report_compares(trained, tmp_path, capsys):
    root, params, _ = trained
    evaluate(EvaluateParams.model_validate({**params["evaluate"], "run_name": "sft"}))
    runs = experiment_runs(root / "mlflow")
    assert {"sft", "grpo"} <= {report_module.arm(r) for r in runs}
    path = report_module.report(root / "mlflow", "slca", tmp_path / "summary")
    text = path.read_text()
    assert "| sft | 1 |" in text and "| grpo |" in text
    assert "value probe (val)" in text.splitlines()[2]  # the table's head
    # per-task lines read back from the store's artifacts: GRPO against SFT, task by task
    summary = json.loads((tmp_path / "summary/summary.json").read_text())
    assert summary["grpo"]["paired"]["vs_sft"]["success_points"]["tasks"] > 0
    assert "eval/value_probe/value_accuracy" in summary["sft"]["mean"]
    assert (tmp_path / "summary/curve_reward_total.png").exists()
    # the learning curves: in the report and in the training run, which stays finished
    assert (tmp_path / "summary/curve_learning.png").exists()
    client = MlflowClient(f"sqlite:///{root / 'mlflow/mlflow.db'}")
    (grpo,) = [r for r in runs if report_module.arm(r) == "grpo"]
    logged = [a.path for a in client.list_artifacts(grpo.run_id, "report")]
    assert logged == ["report/curve_learning.png"]
    assert client.get_run(grpo.run_id).info.status == "FINISHED"
    assert [step for step, _ in grpo.curves["val/success_at_0.9"]] == [0, 1, 2]
    # the command prints the table and the paired differences (before the first image)
    again = ["--tracking-dir", str(root / "mlflow"), "--out", str(tmp_path / "again")]
    assert report_module.main(again) == 0
    printed = capsys.readouterr().out
    assert "| grpo |" in printed and "Success@0.9 − SFT (points)" in printed


def test_errors_name_the_problem(trained, tmp_path, capsys):
    root, params, _ = trained
    bad = {**params["evaluate"], "in_domain": {"split": "val", "sources": ["nope"]}}
    with pytest.raises(ValueError, match=r"no 'val' task .* from sources \['nope'\]"):
        evaluate(EvaluateParams.model_validate(bad))
    file = tmp_path / "params.yaml"
    file.write_text("evaluate:\n  max_turns: 0\n")
    assert main(["--params", str(file)]) == 1
    assert "evaluate.max_turns" in capsys.readouterr().err
    assert report_module.main(["--tracking-dir", str(tmp_path / "none")]) == 1
    assert not (tmp_path / "none").exists()  # reading a report creates no store


def test_a_transcript_keeps_every_turn_as_written_with_its_calls_and_errors():
    first = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    second = '<tool_call>{"name": oops</tool_call>\n<tool_call>\n{"name": "f", "arguments": {}}'
    rollout = Rollout(task_id="t", group=0, sample=0, prompt_length=3)
    rollout.turns = [
        Turn(first, parse_turn(first), False, 3, 10),
        Turn(second, parse_turn(second), False, 12, 20),
    ]
    weather = {"temperature": 4}
    rollout.calls = [ExecutedCall(0, 0, 0, "get_weather", {"city": "Oslo"}, weather, 0)]
    rollout.finish_reason = "max_tokens"
    turns = transcript(rollout)
    assert [t["text"] for t in turns] == [first, second]
    assert turns[0]["calls"] == [
        {"name": "get_weather", "arguments": {"city": "Oslo"}, "response": weather}
    ]
    assert turns[0]["call_errors"] == []
    # the second turn was cut off: its malformed and unclosed blocks are errors, no call ran
    assert turns[1]["calls"] == [] and len(turns[1]["call_errors"]) == 2
    assert json.loads(json.dumps(turns)) == turns


def test_a_registered_version_is_evaluated_as_the_run_s_out_dir(trained, tmp_path):
    root, params, run_id = trained
    client = MlflowClient(f"sqlite:///{root / 'mlflow/mlflow.db'}")
    (version,) = client.search_model_versions(f"name = 'slca-policy' AND run_id = '{run_id}'")
    bad = {**params["evaluate"], "model_dir": "models:/slca-policy@nope"}
    with pytest.raises(ValueError, match="models:/slca-policy@nope: 'slca-policy' has no alias"):
        evaluate(EvaluateParams.model_validate(bad))
    out_dir = {
        **params["evaluate"],
        "model_dir": str(root / "models/rl"),
        "report_path": str(tmp_path / "out_dir.json"),
        "tracking_dir": None,
    }
    registered = {
        **params["evaluate"],
        "model_dir": f"models:/slca-policy/{version.version}",
        "report_path": str(tmp_path / "registered.json"),
    }
    figures = evaluate(EvaluateParams.model_validate(registered))
    assert figures == evaluate(EvaluateParams.model_validate(out_dir))  # the same model
    # logged into the version's run; the version carries the figures and is champion
    run = client.get_run(run_id)
    assert run.data.metrics["eval/in_domain/success_at_0.9"] == figures["in_domain/success_at_0.9"]
    tags = client.get_model_version("slca-policy", version.version).tags
    assert float(tags["eval/in_domain/success_at_0.9"]) == figures["in_domain/success_at_0.9"]
    aliases = client.get_registered_model("slca-policy").aliases
    assert str(aliases["champion"]) == str(aliases["challenger"]) == str(version.version)
