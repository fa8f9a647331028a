"""tools/gpu_credit.py: the credit experiment's plan (dry run: fits or refuses in one
line; limits from one deadline), its summary from the run files alone (with and without
scipy; a failing summary leaves the files as they were), and the whole experiment end to
end in its CPU smoke mode, in the GPU image's Python with the bundle."""

import hashlib
import importlib.util
import json
import sys
import tarfile
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "gpu_credit.py"


@pytest.fixture(scope="module")
def credit():
    spec = importlib.util.spec_from_file_location("gpu_credit", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the plan ----------------------------------------------------------------------------


def test_the_dry_run_prints_a_plan_that_fits(credit, capsys):
    assert credit.main(["--dry-run", "--gpu-gib", "139"]) == 0
    out = capsys.readouterr().out
    assert "2 seeds x grpo/slca (4 RL runs)" in out
    assert "train (9 steps)" in out and "sampled val+test (200 tasks x 8)" in out
    assert "fits" in out and "does NOT fit" not in out
    assert "rl_step_ten_s = 33" in out  # every estimate with its source


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["--steps", "10", "--gpu-gib", "139"], "the plan does not fit: it ends at"),
        (["--parallel", "5", "--gpu-gib", "78"], "--parallel 5 does not fit: 78.0 GiB free"),
        (["--gpu-gib", "30"], "the GPU is too small for one run per arm"),
    ],
)
def test_a_plan_that_does_not_fit_is_refused_in_one_line(credit, capsys, tmp_path, argv, why):
    out = tmp_path / "credit"
    assert credit.main([*argv, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"gpu_credit: refused: {why}") and "\n" not in err
    assert not out.exists()  # nothing started


def test_every_worker_reads_one_absolute_deadline_and_its_parts_limits(credit, tmp_path):
    args = credit.parse(["--gpu-gib", "139"])
    settings = credit.settings_of(args)
    plan = credit.make_plan(args, settings, 139.0)
    record = credit.plan_record(plan, settings, started=1000.0)
    end_by, limits = record["end_by"], plan.limits()
    assert end_by["deadline"] == 1540.0
    assert end_by["greedy"] == pytest.approx(1000.0 + limits["greedy test"]) == 1530.0
    assert end_by["train"] == pytest.approx(1000.0 + limits["train (9 steps)"], abs=0.1)
    assert end_by["prepare"] < end_by["base_model"] < end_by["sft"] < end_by["train"]
    assert end_by["train"] < end_by["sampled"] < end_by["greedy"] < end_by["deadline"]
    assert record["runs"] == ["grpo-s0", "slca-s0", "grpo-s1", "slca-s1"]
    assert record["settings"]["sampled"]["tasks"] == 200
    assert record["settings"]["validation"] == {"every": 0}
    # a worker's Check keeps the orchestrator's deadline, whenever the worker started
    gpu_check = credit.gpu_check
    report = gpu_check.Report(tmp_path / "r.json", "credit-run")
    worker_args = credit.parse(["--worker", "grpo-s0"])
    check = gpu_check.Check(worker_args, report, tmp_path, deadline=end_by["deadline"])
    assert check.deadline == 1540.0
    # a part whose estimate would outrun its limit does not start
    assert gpu_check.time_left_reason(10.0, end_by=1100.0, now=1000.0) is None
    late = gpu_check.time_left_reason(150.0, end_by=1100.0, now=1000.0)
    assert late == "would not end by its limit (estimate 150 s, 100 s left)"
    assert gpu_check.time_left_reason(1.0, end_by=1100.0, now=1200.0).startswith(
        "time budget spent"
    )


class FakeClock:
    """time.time and time.perf_counter, advanced by hand (the fake steps take time)."""

    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now

    perf_counter = time


def test_training_stops_before_a_step_that_would_outrun_its_limit(credit, monkeypatch):
    """Training ends at its limit (the deadline minus the evaluations' time) and keeps
    its policy for them; a run that finishes its steps is not touched."""
    import contextlib

    import slca.training.session as session

    gpu_check, clock, saved = credit.gpu_check, FakeClock(), []

    class Trainer:
        def __init__(self, steps, step_s):
            self.steps, self.step_s = steps, step_s
            self.state = type("State", (), {"step": 0})()

        @property
        def done(self):
            return self.state.step >= self.steps

        def train_step(self):
            clock.now += self.step_s
            return {}

        def end_step(self, metrics):
            self.state.step += 1

    def fake_session(trainer):
        @contextlib.contextmanager
        def training_session(config, **kwargs):
            yield trainer
            if not trainer.done:  # as the real session: it refuses to end short
                raise RuntimeError(f"train: the session ended at step {trainer.state.step}")

        return training_session

    monkeypatch.setattr(gpu_check, "time", clock)
    monkeypatch.setattr(gpu_check, "save_policy", lambda t, out: saved.append(t.state.step))
    config = type("Config", (), {"steps": 9, "out_dir": "/nowhere"})()
    # steps of 20 s from t = 1000 with the limit at 1065: three end by 1060, a fourth
    # would end at 1080
    monkeypatch.setattr(session, "training_session", fake_session(Trainer(9, 20.0)))
    assert gpu_check.train_until(config, None, stop_at=1065.0, first_step_s=25.0) == (3, True)
    assert saved == [3] and clock.now == 1060.0
    # the plan's first-step estimate decides before any step ran
    clock.now, saved[:] = 1000.0, []
    monkeypatch.setattr(session, "training_session", fake_session(Trainer(9, 20.0)))
    assert gpu_check.train_until(config, None, stop_at=1030.0, first_step_s=40.0) == (0, True)
    assert saved == []  # nothing trained: nothing to save
    # within its limit a run runs all its steps, and the session writes its policy
    clock.now = 1000.0
    monkeypatch.setattr(session, "training_session", fake_session(Trainer(3, 20.0)))
    assert gpu_check.train_until(config, None, stop_at=2000.0, first_step_s=20.0) == (3, False)
    assert saved == []


# --- the summary --------------------------------------------------------------------------

TASKS = ["t0", "t1", "t2", "t3", "t4"]
SAMPLED = {  # each model's success per task: the mean over its k = 8 samples
    "sft": [0.5, 0.25, 1.0, 0.0, 0.5],
    "grpo-s0": [0.5, 0.5, 1.0, 0.0, 0.5],
    "grpo-s1": [0.625, 0.25, 1.0, 0.0, 0.5],
    "slca-s0": [0.5, 0.5, 1.0, 0.0, 0.5],  # as GRPO, seed for seed: no task differs
    "slca-s1": [0.625, 0.25, 1.0, 0.0, 0.5],
}
GREEDY = {  # process score per test task
    "sft": [1.0, 0.5, 1.0, 0.0, 1.0],
    "grpo-s0": [1.0, 1.0, 1.0, 0.0, 1.0],
    "grpo-s1": [1.0, 0.5, 1.0, 0.0, 1.0],
    "slca-s0": [1.0, 1.0, 1.0, 1.0, 1.0],
    "slca-s1": [1.0, 1.0, 1.0, 0.0, 1.0],
}


def experiment_dir(tmp_path: Path) -> Path:
    """What the workers leave: reports, streamed lines, logs, and the plan."""
    out = tmp_path / "credit"
    raw = out / "raw"
    for part in ("runs", "sampled", "eval", "logs"):
        (raw / part).mkdir(parents=True)
    settings = {"sampled": {"k": 8, "temperature": 1.0, "splits": ["val", "test"], "tasks": 5}}
    (out / "plan.json").write_text(json.dumps({"settings": settings, "estimates": {}}))
    for name, values in SAMPLED.items():
        lines = [
            {"split": "val", "task_id": t, "samples": 8, "success": v}
            for t, v in zip(TASKS, values)
        ]
        (raw / "sampled" / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        greedy = [{"task_id": t, "process": v} for t, v in zip(TASKS, GREEDY[name])]
        (raw / "eval" / f"{name}.tasks.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in greedy)
        )
        parts = {"sampled": {"status": "ok", "done": 5, "tasks": 5, "wall_s": 30.0}}
        if name != "sft":
            parts["train"] = {"status": "ok", "steps": 9, "planned_steps": 9, "step_s": 20.0}
        (raw / "runs" / f"{name}.json").write_text(json.dumps({"parts": parts, "started_s": 90}))
        (raw / "logs" / f"{name}.log").write_text("gpu_check: train: ok\n")
    # a line a killed writer left half-written is skipped
    with (raw / "sampled" / "grpo-s1.jsonl").open("a") as f:
        f.write('{"split": "test", "task_id": "t9", "succ')
    return out


def digests(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_the_summary_pairs_sampled_scores_by_task_with_intervals(credit, tmp_path):
    pytest.importorskip("scipy")
    out = experiment_dir(tmp_path)
    before = digests(out / "raw")
    assert credit.main(["--summarise", str(out)]) == 0
    assert digests(out / "raw") == before  # the run files are only read
    data = json.loads((out / "summary.json").read_text())
    arms = data["primary"]["arms"]
    assert arms["sft"]["runs"] == 1 and arms["grpo"]["runs"] == arms["slca"]["runs"] == 2
    assert arms["grpo"]["tasks"] == 5  # the half-written line is not a task
    paired = data["primary"]["paired"]
    # per task, the mean over seeds x samples: t0 +0.0625, t1 +0.125 over SFT
    grpo_sft = paired["grpo"]["vs_sft"]
    assert grpo_sft["mean"] == pytest.approx(100 * 0.1875 / 5)
    assert grpo_sft["mean"] == pytest.approx(100 * (arms["grpo"]["rate"] - arms["sft"]["rate"]))
    assert grpo_sft["low"] <= grpo_sft["mean"] <= grpo_sft["high"]
    assert grpo_sft["seeds"] == 2 and not grpo_sft["no_difference"]
    assert paired["slca"]["vs_grpo"]["no_difference"]
    text = (out / "summary.md").read_text()
    assert "| slca | no difference observed (5 tasks) |" in text
    assert "[+0.0, +0.0]" not in text
    assert "95 % BCa over tasks" in text
    secondary = data["secondary"]["paired"]["slca"]["vs_grpo"]
    assert secondary["mean"] == pytest.approx(100 * (1 / 5 + 0 + 1 / 5) / 2 / 1)
    with tarfile.open(out / "raw.tar.gz") as bundle:
        names = set(bundle.getnames())
    assert {"raw/sampled/sft.jsonl", "raw/logs/grpo-s0.log", "raw/runs/slca-s1.json"} <= names


def test_without_scipy_the_summary_gives_means_and_says_where_to_get_intervals(
    credit, tmp_path, monkeypatch
):
    out = experiment_dir(tmp_path)
    # the GPU image has no scipy: importing it fails there
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.stats", None)
    assert not credit.scipy_available()
    assert credit.summarise(out) == 0
    data = json.loads((out / "summary.json").read_text())
    grpo_sft = data["primary"]["paired"]["grpo"]["vs_sft"]
    assert grpo_sft["mean"] == pytest.approx(100 * 0.1875 / 5)
    assert "low" not in grpo_sft and "high" not in grpo_sft
    assert data["primary"]["paired"]["slca"]["vs_grpo"]["no_difference"]
    text = (out / "summary.md").read_text()
    assert "intervals not computed (scipy is not importable here)" in text
    assert "--summarise DIR" in text
    assert "| grpo | – | +3.8 (5 tasks, 2 seeds) |" in text


def test_a_failing_summary_leaves_the_run_files_as_they_were(credit, tmp_path, capsys):
    out = experiment_dir(tmp_path)
    (out / "raw" / "runs" / "slca-s1.json").write_text("{not json")  # a corrupt report
    (out / "summary.md").write_text("an earlier summary\n")
    before = digests(out / "raw")
    assert credit.summarise(out) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_credit: summary failed (JSONDecodeError") and "\n" not in err
    assert err.endswith("raw is intact")
    assert digests(out / "raw") == before
    assert (out / "summary.md").read_text() == "an earlier summary\n"  # not half-replaced
    assert not list(out.glob(".*.tmp"))
    assert credit.summarise(tmp_path / "nothing") == 1


# --- end to end ----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_smoke_experiment_runs_every_arm_and_seed_and_pairs_them(gpu_make, tmp_path):
    """As on a GPU machine: `make gpu-credit` with the image's Python and the bundle
    (conftest's ``gpu_make``; no scipy there: means without intervals), one seed an arm."""
    out = tmp_path / "credit"
    # a budget the CPU smoke cannot outrun on a loaded machine (its limits follow it)
    args = f"--smoke --seeds 1 --budget-s 1500 --out {out} --work {tmp_path / 'w'}"
    run = gpu_make("gpu-credit", args)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads((out / "credit.json").read_text())
    assert report["mode"] == "credit-smoke" and report["summary"]["failed"] == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["end_by"]["deadline"] == pytest.approx(plan["started"] + 1500)
    names = {"grpo-s0", "slca-s0"}
    assert set(plan["runs"]) == names
    assert report["parts"]["runs"]["exits"] == dict.fromkeys(names | {"sft"}, 0)
    raw = out / "raw"
    for name in names:
        parts = json.loads((raw / "runs" / f"{name}.json").read_text())["parts"]
        assert parts["train"]["status"] == "ok" and parts["train"]["steps"] == 1, name
        assert parts["sampled"]["done"] == parts["sampled"]["tasks"] > 0
        assert parts["eval"]["status"] == "ok"
        # the step's figures were streamed as it ended; no validation during training
        (point,) = [json.loads(x) for x in (raw / "runs" / f"{name}.steps.jsonl").open()]
        assert point["step"] == 1 and "val/success_at_0.9" not in point
    sft = json.loads((raw / "runs" / "sft.json").read_text())["parts"]
    assert "train" not in sft and sft["sampled"]["status"] == "ok"
    summary = json.loads((out / "summary.json").read_text())
    arms = summary["primary"]["arms"]
    assert arms["sft"]["runs"] == arms["grpo"]["runs"] == arms["slca"]["runs"] == 1
    # the same tasks for every model: the paired mean is the difference of the rates
    for arm, base in (("slca", "grpo"), ("grpo", "sft"), ("slca", "sft")):
        d = summary["primary"]["paired"][arm][f"vs_{base}"]
        assert d["tasks"] == arms[base]["tasks"] and d["seeds"] == 1
        assert d["mean"] == pytest.approx(100 * (arms[arm]["rate"] - arms[base]["rate"]))
    tables = (out / "summary.md").read_text()
    assert "| sampled pass@1 | runs | tasks | Success@0.9 (%) |" in tables
    assert "| greedy test | runs | tasks | Success@0.9 (%) |" in tables
    assert "intervals not computed (scipy is not importable here)" in tables
    with tarfile.open(out / "raw.tar.gz") as bundle:
        names_in = set(bundle.getnames())
    assert {"raw/runs/slca-s0.steps.jsonl", "raw/logs/grpo-s0.log"} <= names_in
    assert {"raw/sampled/sft.jsonl", "raw/eval/sft.tasks.jsonl"} <= names_in
