"""tools/gpu_check.py: the prepared GPU check runs end to end (here in its CPU smoke mode)
and writes one valid JSON report; what it cannot run is skipped, visibly. The smoke runs in
the GPU image's Python with the bundle (conftest's ``gpu_make``), as on a GPU machine."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "gpu_check.py"
CORE = ("prepare", "base_model", "sft", "train/grpo/hf", "train/slca/hf")
CORE += ("eval/sft", "eval/grpo-hf", "eval/slca-hf")


def load_tool():
    spec = importlib.util.spec_from_file_location("gpu_check", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_smoke_check_runs_end_to_end_and_writes_one_valid_report(gpu_make, tmp_path):
    """As on a GPU machine: `make gpu-check` with the image's Python and the bundle
    (conftest's ``gpu_make``), the one run of the smoke in the tests."""
    out = tmp_path / "report.json"
    run = gpu_make("gpu-check", f"--smoke --out {out} --work {tmp_path / 'w'}")
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(out.read_text())
    parts = report["parts"]
    assert report["environment"]["missing_modules"] == []
    assert report["mode"] == "smoke" and report["summary"]["failed"] == 0
    assert all(parts[name]["status"] == "ok" for name in CORE), {
        n: parts[n].get("error") for n in CORE
    }
    for name in ("train/grpo/hf", "train/slca/hf"):
        part = parts[name]
        assert part["steps"] == 1 and part["step_s"] > 0 and part["tokens_per_s"] > 0
        assert part["rollout_s"] + part["update_s"] <= part["step_s"]
        assert part["rollout_engine"] == "hf" and part["update_engine"] == "torch"
        assert {"reward/tool", "reward/sum", "actor/pg_loss"} <= set(part["final_metrics"])
    assert parts["sft"]["tokens_per_s"] > 0 and parts["sft"]["steps"] == 4
    assert 0 <= parts["eval/slca-hf"]["metrics"]["in_domain/success_at_0.9"] <= 1
    assert parts["eval/slca-hf"]["tasks"] == 4
    if not report["environment"]["cuda"]:
        assert parts["cuda"]["status"] == "skipped" and "no CUDA device" in parts["cuda"]["reason"]
        assert parts["train/slca/hf"]["peak_gpu_memory_gib"] is None
        assert parts["train/slca/hf"]["mfu_update"] is None
    for name in ("train/grpo/vllm", "train/slca/vllm", "train/slca/deepspeed-zero2"):
        assert parts[name]["status"] == "skipped" and parts[name]["reason"]
    assert (tmp_path / "w" / "models" / "slca-hf" / "model.safetensors").is_file()
    # an existing report is never replaced
    again = gpu_make("gpu-check", f"--smoke --out {out}")
    assert again.returncode != 0 and "exists" in again.stderr
    assert json.loads(out.read_text()) == report


def test_missing_packages_fail_the_check_with_the_fix_in_the_report(tmp_path, monkeypatch):
    tool = load_tool()
    monkeypatch.setattr(tool, "REQUIRED", (*tool.REQUIRED, "no_such_module_xyz"))
    out = tmp_path / "report.json"
    assert tool.main(["--out", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["parts"]["environment"]["status"] == "failed"
    assert "no_such_module_xyz" in report["parts"]["environment"]["error"]
    assert "make gpu-bundle" in report["parts"]["environment"]["error"]


def test_the_full_check_on_a_cpu_skips_every_part_visibly(tmp_path, monkeypatch):
    tool = load_tool()
    out = tmp_path / "report.json"
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tool.main(["--out", str(out), "--work", str(tmp_path / "w")]) == 0
    parts = json.loads(out.read_text())["parts"]
    assert parts["environment"]["status"] == "ok"
    skipped = {n: p["reason"] for n, p in parts.items() if n != "environment"}
    assert set(skipped) >= set(CORE)
    assert all(parts[n]["status"] == "skipped" for n in skipped)
    assert "no CUDA device (--smoke runs the CPU version)" in skipped["sft"]
    assert not (tmp_path / "w" / "data").exists()  # nothing ran


def test_mfu_and_phase_figures_follow_the_stated_formula(monkeypatch):
    tool = load_tool()
    monkeypatch.setattr(tool, "peak_flops", lambda: (1e12, "test peak"))
    step = {
        "perf/step_s": 2.0,
        "perf/rollout_s": 1.2,
        "perf/update_s": 0.5,
        "perf/tokens_per_s": 500.0,  # 1000 tokens a step
        "rollout/policy_tokens": 240.0,
        "reward/tool": 0.5,
    }
    warmup = {**step, "perf/step_s": 9.0, "perf/tokens_per_s": 1000 / 9.0}
    figures = tool.rl_figures([warmup, step, step], n_params=1_000_000, forwards=1)
    assert figures["steps"] == 3 and figures["timed_steps"] == 2  # warm-up left out
    assert figures["step_s"] == 2.0 and figures["score_and_other_s"] == pytest.approx(0.3)
    assert figures["tokens_per_step"] == 1000 and figures["generated_tokens_per_s"] == 200
    # update: (6 + 2) · 1e6 · 1000 = 8e9 FLOPs in 0.5 s of a 1e12 FLOP/s device
    assert figures["mfu_update"] == pytest.approx(8e9 / 0.5 / 1e12)
    assert figures["mfu_step"] == pytest.approx((8e9 + 2e9) / 2.0 / 1e12)
    assert figures["final_metrics"] == {"rollout/policy_tokens": 240.0, "reward/tool": 0.5}


def test_a_part_can_choose_the_update_engine_beside_the_rollout_engine(tmp_path):
    """The DeepSpeed part passes ``engine`` (the update engine) with the rollout engine:
    the two must not collide (a collision was only found when the part first ran)."""
    tool = load_tool()
    args = tool.argparse.Namespace(smoke=False, steps=10, budget_s=1.0)
    report = tool.Report(tmp_path / "report.json", "full")
    check = tool.Check(args, report, tmp_path / "w")
    config = check.train_config(
        "slca",
        "hf",
        "deepspeed",
        steps=3,
        engine={"engine": "deepspeed", "zero_stage": 2, "optim": {"lr": 1e-6}},
    )
    assert config.engine.engine == "deepspeed" and config.engine.zero_stage == 2
    assert config.rollout.engine == "hf" and config.steps == 3
    assert config.out_dir == str(tmp_path / "w" / "models" / "slca-deepspeed")
