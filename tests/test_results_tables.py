"""tools/results_tables.py: the results tables built from a JSON report in docs/results/
are rendered from it; the committed pages hold the rendering (ADR 0078)."""

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "results_tables.py"


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("results_tables", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("results_tables", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def results(tmp_path):
    """A copy of the reports the blocks read."""
    out = tmp_path / "results"
    for summary in (ROOT / "docs/results").glob("*/summary.json"):
        (out / summary.parent.name).mkdir(parents=True)
        shutil.copy(summary, out / summary.parent.name)
    (out / "bandit").mkdir()
    shutil.copy(ROOT / "docs/results/bandit/bandit.json", out / "bandit")
    for report in (
        "gpu-check/h200-2026-12-04.json",
        "gpu-credit/h200-2026-12-04-credit.json",
        "gpu-credit/h200-2026-12-04-headroom.json",
    ):
        (out / report).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / "docs/results" / report, out / report)
    return out


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_the_committed_pages_are_the_rendering(tables):
    assert tables.apply(check=True) == []
    assert tables.main(["--check"]) == 0


def test_every_block_is_in_its_page_once(tables):
    for name, (page, _) in tables.BLOCKS.items():
        text = (ROOT / page).read_text()
        assert text.count(tables.begin(name)) == 1, (page, name)


def test_figures_keep_the_pages_format(tables):
    table = tables.render_rl_vs_sft(ROOT / "docs/results")
    assert "| +2.0 [+0.2, +4.4] | +2.8 [+0.9, +5.7] |" in table
    assert "| −1.7 [−4.0, +0.7] | −2.0 [−4.6, +0.3] |" in table
    sentence = tables.render_redundant(ROOT / "docs/results")
    assert "−0.00 [−0.03, +0.03] (credit v3)" in sentence
    lab = tables.render_lab(ROOT / "docs/results")
    assert (
        "0.83 / 0.76 / **0.70** (29 / 28 / 33 against 35 / 37 / 47; "
        "one SLCA seed censored at spread 2)" in lab
    )


def test_a_changed_report_value_changes_the_block(tables, results):
    before = tables.render_rl_vs_sft(results)
    edit(
        results / "credit-v2-l3/summary.json",
        lambda d: d["grpo"]["paired"]["vs_sft"]["success_points"].update(mean=-2.5),
    )
    after = tables.render_rl_vs_sft(results)
    assert "+2.0 [+0.2, +4.4]" in before
    assert "−2.5 [+0.2, +4.4]" in after


def test_a_changed_lab_median_changes_ratio_and_bold(tables, results):
    edit(results / "lab/summary.json", lambda d: d["arms"][5].update(median=30.0))  # slca, spread 2
    lab = tables.render_lab(results)
    assert "0.97 / 1.23 / **0.65**" in lab  # 30 / 46 meets the 0.8 target


def test_a_changed_value_makes_check_fail_naming_page_and_block(tables, results, tmp_path, capsys):
    root = tmp_path / "repo"
    (root / "docs/benchmarks").mkdir(parents=True)
    shutil.copy(ROOT / "docs/results.md", root / "docs/results.md")
    shutil.copy(ROOT / "docs/benchmarks/gpu-check.md", root / "docs/benchmarks/gpu-check.md")
    edit(
        results / "credit-v3-l3/summary.json",
        lambda d: d["slca"]["paired"]["vs_grpo"]["success_points"].update(mean=3.0, low=0.4),
    )
    differ = tables.apply(root=root, results=results, check=True)
    assert differ == ["docs/results.md: credit-slca-vs-grpo"]
    assert (root / "docs/results.md").read_text() == (ROOT / "docs/results.md").read_text()
    tables.apply(root=root, results=results)  # writes the rendering
    text = (root / "docs/results.md").read_text()
    assert "| +3.0 [+0.4, +2.4] | paired, 95 % BCa | met |" in text
    assert tables.apply(root=root, results=results, check=True) == []


def test_a_missing_report_names_the_file(tables, results):
    (results / "credit-v2/summary.json").unlink()
    with pytest.raises(
        tables.ReportError, match=r"docs/results/credit-v2/summary\.json: no such report"
    ):
        tables.render_rl_vs_sft(results)


def test_a_missing_key_names_the_file_and_the_key(tables, results):
    edit(
        results / "credit-v3-l3/summary.json",
        lambda d: d["slca"]["paired"]["vs_sft"].pop("success_points"),
    )
    with pytest.raises(
        tables.ReportError,
        match=r"docs/results/credit-v3-l3/summary\.json: "
        r"no key slca/paired/vs_sft/success_points/mean",
    ):
        tables.render_rl_vs_sft(results)
    edit(results / "bandit/bandit.json", lambda d: d.pop("seeds"))
    with pytest.raises(tables.ReportError, match=r"docs/results/bandit/bandit\.json: no key seeds"):
        tables.render_lab(results)


def test_a_page_without_its_markers_is_an_error(tables, tmp_path):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs/results.md").write_text("# Results\n")
    with pytest.raises(tables.ReportError, match="docs/results.md: no block credit-rl-vs-sft"):
        tables.apply(root=root, results=ROOT / "docs/results", check=True)


def test_the_gpu_blocks_keep_the_pages_format(tables):
    runs = tables.render_gpu_runs(ROOT / "docs/results")
    assert "10 parts ok, 2 skipped (vLLM not importable), 399 s; Success@0.9 SFT 0.60" in runs
    assert "steps 12–14 of 16 reached, no test evaluation; held-out SLCA − GRPO 0.000" in runs
    assert "sampled pass@1 0.573, best of 4 0.791 (Success@0.9)" in runs
    parts = tables.render_gpu_check(ROOT / "docs/results")
    assert "| base model (GGUF → HF, 134.5 M parameters) | 30.9 | – | |" in parts
    assert "MFU 2.3 % of the update, 0.19 % of the step |" in parts
    assert "| 5.8 / 5.5 / 8.7 | 3.3 / 3.6 | Success@0.9 0.60 / 0.70 / 0.80;" in parts


def test_a_changed_gpu_report_value_changes_the_blocks(tables, results):
    check = results / "gpu-check/h200-2026-12-04.json"
    edit(check, lambda d: d["parts"]["train/grpo/hf"].update(step_s=15.0, peak_gpu_memory_gib=9.0))
    edit(check, lambda d: d["parts"]["eval/slca-hf"]["metrics"].update({"in_domain/value": 0.75}))
    parts = tables.render_gpu_check(results)
    assert "| 9.0 / 22.5 | step 15.00 s: rollout 12.67," in parts
    assert "value accuracy 0.85 / 0.85 / 0.75 |" in parts
    edit(
        check,
        lambda d: d["parts"]["eval/sft"]["metrics"].update({"in_domain/success_at_0.9": 0.55}),
    )
    assert "Success@0.9 SFT 0.55, GRPO 0.70" in tables.render_gpu_runs(results)
    edit(
        results / "gpu-credit/h200-2026-12-04-credit.json",
        lambda d: d["comparison"]["curves"]["slca"][-1].update(mean=0.8),
    )
    edit(
        results / "gpu-credit/h200-2026-12-04-headroom.json",
        lambda d: d["val"]["parts"]["success"].update(pass1=0.6),
    )
    runs = tables.render_gpu_runs(results)
    assert "held-out SLCA − GRPO +0.014" in runs
    assert "sampled pass@1 0.600, best of 4" in runs


def test_a_changed_gpu_check_makes_check_fail_naming_the_benchmark_page(tables, results, tmp_path):
    root = tmp_path / "repo"
    (root / "docs/benchmarks").mkdir(parents=True)
    shutil.copy(ROOT / "docs/results.md", root / "docs/results.md")
    shutil.copy(ROOT / "docs/benchmarks/gpu-check.md", root / "docs/benchmarks/gpu-check.md")
    edit(
        results / "gpu-check/h200-2026-12-04.json",
        lambda d: d["summary"].update(wall_s=420.2, failed=1),
    )
    differ = tables.apply(root=root, results=results, check=True)
    assert differ == [
        "docs/results.md: gpu-runs",
        "docs/benchmarks/gpu-check.md: gpu-check-summary",
    ]
    tables.apply(root=root, results=results)
    text = (root / "docs/benchmarks/gpu-check.md").read_text()
    assert "1 failed; 420 s in all." in text
    assert tables.apply(root=root, results=results, check=True) == []


def test_a_missing_gpu_key_names_the_file_and_the_key(tables, results):
    edit(
        results / "gpu-check/h200-2026-12-04.json", lambda d: d["parts"]["sft"].pop("tokens_per_s")
    )
    with pytest.raises(
        tables.ReportError,
        match=r"docs/results/gpu-check/h200-2026-12-04\.json: no key parts/sft/tokens_per_s",
    ):
        tables.render_gpu_check(results)
