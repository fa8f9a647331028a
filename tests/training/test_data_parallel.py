"""Data parallel on CPU: 2 processes (torchrun, gloo) reach what 1 process reaches.

The same RL run (2 tasks × 4 rollouts a step, micro-batches of 2, a KL term, a scripted
policy, so the rollouts do not depend on how prompts are batched) is run in one process
and under ``torchrun --nproc_per_node 2`` with DDP, DeepSpeed ZeRO-2 and ZeRO-3. Every
logged figure of every step and the weights of every checkpoint must agree. A second
2-process launch resumes from the first one's checkpoint and must land where the
uninterrupted one-process run did.

Tolerances: figures 1e-5 relative (float32 sums in another order). Weights: mean
absolute difference 1e-8 and largest 3e-5, against steps of lr = 1e-3. AdamW's early
steps move a weight by ~lr·sign(g), so where a gradient element is a near-cancelling
sum close to AdamW's ε, summation-order noise moves that weight by a sizeable fraction
of a step: measured (DDP, step 1) 2 of 128,000 weights off by more than 1e-6 (largest
1.1e-5), mean 2.5e-10.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from slca.training.tiny import tiny_model, train_tokenizer

WORKER = Path(__file__).with_name("dp_worker.py")
sys.path.insert(0, str(WORKER.parent))  # the worker's run() is the one-process reference
import dp_worker  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIGURE_RTOL, WEIGHT_MEAN_ATOL, WEIGHT_MAX_ATOL = 1e-5, 1e-8, 3e-5
TIMED = ("perf/", "sim/latency_ms")

pytestmark = pytest.mark.slow
needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not installed (make .venv/.installed installs it)",
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The initial model and tokenizer every process loads."""
    texts = [m.content for t in dp_worker.tasks() for m in t.messages] * 3
    texts += [dp_worker.call("Paris"), "It is 21 degrees in Paris. No idea, sorry."] * 3
    tokenizer = train_tokenizer(texts, vocab_size=500)
    directory = tmp_path_factory.mktemp("setup")
    tiny_model(tokenizer, seed=0).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def one_process(setup, tmp_path_factory):
    """The reference: 3 steps in this process with the torch engine."""
    workdir = tmp_path_factory.mktemp("one")
    result = dp_worker.run(setup, workdir, "torch", 0, 3, resume=False)
    assert result["world_size"] == 1
    (workdir / "result.json").write_text(json.dumps(result))  # beside the launches' ones
    return result, workdir


def launch(setup, workdir, engine, stage, steps, resume=False):
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        DS_ACCELERATOR="cpu",
        TORCH_EXTENSIONS_DIR=str(workdir / "torch_extensions"),  # must stay empty
        OMP_NUM_THREADS="1",
    )
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--log-dir", str(workdir / "torchrun")]  # else a torchelastic_* in /tmp
    command += ["--nproc_per_node", "2", str(WORKER), str(setup), str(workdir)]
    command += [engine, str(stage), str(steps)] + (["resume"] if resume else [])
    (workdir / "result.json").unlink(missing_ok=True)
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert not (workdir / "torch_extensions").exists(), "DeepSpeed compiled an op on CPU"
    return json.loads((workdir / "result.json").read_text())


def assert_same_figures(got, want):
    """Every untimed figure of every step in ``got`` equals ``want``'s at that step."""
    reference = dict((step, m) for step, m in want["metrics"])
    assert got["metrics"], "no step logged"
    for step, metrics in got["metrics"]:
        expected = {k: v for k, v in reference[step].items() if not k.startswith(TIMED)}
        assert {k for k in metrics if not k.startswith(TIMED)} == set(expected), step
        for key, value in expected.items():
            assert metrics[key] == pytest.approx(value, rel=FIGURE_RTOL, abs=1e-7), (step, key)


def assert_same_weights(checkpoint, reference, setup):
    got, want = (load_file(str(p / "model.safetensors")) for p in (checkpoint, reference))
    assert got.keys() == want.keys()
    diff = torch.cat([(got[k] - want[k]).abs().flatten() for k in want])
    mean, worst = float(diff.mean()), float(diff.max())
    assert mean <= WEIGHT_MEAN_ATOL and worst <= WEIGHT_MAX_ATOL, (
        f"{checkpoint.name}: weights differ by {mean:.2e} on average, up to {worst:.2e}"
    )
    initial = load_file(str(setup / "model.safetensors"))
    moved = torch.cat([(want[k] - initial[k]).abs().flatten() for k in want]).mean()
    assert moved > 1e4 * WEIGHT_MEAN_ATOL  # the steps changed the weights: the test can fail


def test_two_ddp_processes_equal_one_and_resume(setup, one_process, tmp_path):
    reference, one = one_process
    first = launch(setup, tmp_path, "torch", 0, steps=2)
    assert first["world_size"] == 2 and first["device"] == "cpu"
    assert first["state"] == {"step": 2, "tasks_drawn": 4}
    assert [s for s, _ in first["metrics"]] == [1, 2]
    assert_same_figures(first, reference)
    for step in ("step_000001", "step_000002"):
        assert_same_weights(tmp_path / "ckpt" / step, one / "ckpt" / step, setup)
        files = {p.name for p in (tmp_path / "ckpt" / step).iterdir()}
        assert {"rng_state_rank0.pt", "rng_state_rank1.pt", "optimizer.pt"} <= files
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_000001", "step_000002"]

    resumed = launch(setup, tmp_path, "torch", 0, steps=3, resume=True)
    assert [s for s, _ in resumed["metrics"]] == [3]  # nothing logged twice
    assert resumed["state"] == {"step": 3, "tasks_drawn": 6}
    assert_same_figures(resumed, reference)
    assert_same_weights(tmp_path / "ckpt" / "step_000003", one / "ckpt" / "step_000003", setup)


@needs_deepspeed
def test_two_deepspeed_zero2_processes_equal_one(setup, one_process, tmp_path):
    reference, one = one_process
    result = launch(setup, tmp_path, "deepspeed", 2, steps=2)
    assert result["world_size"] == 2
    assert_same_figures(result, reference)
    assert_same_weights(tmp_path / "ckpt" / "step_000002", one / "ckpt" / "step_000002", setup)


@needs_deepspeed
def test_two_deepspeed_zero3_processes_equal_one_and_resume(setup, one_process, tmp_path):
    reference, one = one_process
    result = launch(setup, tmp_path, "deepspeed", 3, steps=2)
    assert_same_figures(result, reference)
    assert_same_weights(tmp_path / "ckpt" / "step_000002", one / "ckpt" / "step_000002", setup)
    resumed = launch(setup, tmp_path, "deepspeed", 3, steps=3, resume=True)
    assert [s for s, _ in resumed["metrics"]] == [3]
    assert_same_figures(resumed, reference)
    assert_same_weights(tmp_path / "ckpt" / "step_000003", one / "ckpt" / "step_000003", setup)
    meta = json.loads((tmp_path / "ckpt" / "step_000003" / "engine.json").read_text())
    assert meta["world_size"] == 2 and meta["steps"] == 3


def test_a_step_that_does_not_split_into_whole_groups_is_refused(setup, tmp_path):
    from slca.training.rl_state import check_data_parallel

    cfg = dp_worker.config("torch", 0, 1)
    check_data_parallel(cfg, 2)
    with pytest.raises(ValueError, match=r"tasks_per_step=2 must be a multiple of the 3"):
        check_data_parallel(cfg, 3)
    odd = cfg.model_copy(update={"update": cfg.update.model_copy(update={"minibatches": 8})})
    with pytest.raises(ValueError, match=r"minibatches=8 must divide each process's 4"):
        check_data_parallel(odd, 2)
