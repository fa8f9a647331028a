"""tools/gpu_credit.py: the credit benchmark's GPU version runs end to end (here in its
CPU smoke mode: tiny model, 1 step, 4 tasks) and reports paired differences that agree
with the per-arm rates."""

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "gpu_credit.py"


@pytest.mark.slow
def test_the_smoke_comparison_runs_every_arm_and_seed_and_pairs_them(tmp_path):
    out = tmp_path / "credit.json"
    cmd = [sys.executable, str(TOOL), "--smoke", "--seeds", "2", "--parallel", "2"]
    cmd += ["--out", str(out), "--work", str(tmp_path / "w")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "credit-smoke" and report["summary"]["failed"] == 0
    comparison = report["comparison"]
    assert set(comparison["runs"]) == {"grpo-s0", "grpo-s1", "slca-s0", "slca-s1"}
    for name, entry in comparison["runs"].items():
        assert entry["exit"] == 0 and entry["train"]["status"] == "ok", name
        assert entry["train"]["steps"] == 1 and entry["eval"]["tasks"] == 4
        # the step's figures were streamed as it ended, held-out validation included
        (point,) = entry["curve"]
        assert point["step"] == 1 and 0 <= point["val/success_at_0.9"] <= 1
    arms = comparison["arms"]
    assert len(arms["sft"]["seeds"]) == 1
    assert arms["grpo"]["seeds"] == arms["slca"]["seeds"] == ["0", "1"]
    # the same tasks for every model: the paired mean is the difference of the rates
    sft_lines = (tmp_path / "w" / "eval" / "sft.tasks.jsonl").read_text().splitlines()
    assert sft_lines
    rate = {a: 100 * arms[a]["mean"]["eval/in_domain/success_at_0.9"] for a in arms}
    for arm, base in (("slca", "grpo"), ("grpo", "sft"), ("slca", "sft")):
        d = comparison["paired"][arm][f"vs_{base}"]["success_points"]
        assert d["tasks"] == len(sft_lines) and d["seeds"] == 2
        assert d["mean"] == pytest.approx(rate[arm] - rate[base])
        assert d["low"] <= d["mean"] <= d["high"]
    tables = out.with_suffix(".md").read_text()
    assert tables.startswith("| arm | seeds | Success@0.9 (%) |") and "| slca | 2 |" in tables
    assert "| arm | Success@0.9 − GRPO (points) |" in tables
    sft_val = json.loads((tmp_path / "w" / "eval" / "sft.val.json").read_text())
    for arm in ("grpo", "slca"):
        start, mean = comparison["curves"][arm]
        # step 0 is the SFT policy on the same val tasks the runs validate on
        assert start["step"] == 0 and start["seeds"] == 1
        assert start["mean"] == pytest.approx(sft_val["in_domain/success_at_0.9"], abs=1e-4)
        values = [
            c["curve"][0]["val/success_at_0.9"]
            for n, c in comparison["runs"].items()
            if n.startswith(arm)
        ]
        assert mean["seeds"] == 2 and mean["mean"] == pytest.approx(sum(values) / 2, abs=1e-4)
    assert "| held-out val/success_at_0.9 | step 0 | step 1 |" in tables
    # sampled val scores: the SFT policy's, and each arm's mean over its runs
    sampled = comparison["sampled"]
    assert sampled["sft"]["runs"] == 1 and sampled["grpo"]["runs"] == sampled["slca"]["runs"] == 2
    for arm in ("grpo", "slca"):
        own = [
            r["headroom"]["parts"]["success"]["pass1"]
            for n, r in comparison["runs"].items()
            if n.startswith(arm)
        ]
        assert sampled[arm]["success_pass1"] == pytest.approx(sum(own) / 2, abs=1e-4)
        assert sampled[arm]["success_pass1"] <= sampled[arm]["success_best_of_g"]
    assert "| sampled val (temperature 1) | runs |" in tables
    with tarfile.open(out.with_suffix(".work.tar.gz")) as bundle:
        names = set(bundle.getnames())
    assert {"runs/slca-s1.steps.jsonl", "logs/grpo-s0.log", "eval/sft.tasks.jsonl"} <= names
