"""The trainer factory builds what ``train.simulator`` and ``train.rewards`` name."""

import contextlib
import dataclasses
import sqlite3

import pytest

from slca.config.simulator import SimulatorConfig, SimulatorLLMConfig
from slca.config.train import TrainConfig
from slca.locks import LockHeld
from slca.simulator import Simulator
from slca.training.factory import build_simulator

TOOL = {
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "response": {
        "type": "object",
        "properties": {"temperature": {"type": "integer"}, "sky": {"type": "string"}},
        "required": ["temperature", "sky"],
    },
}


def answers(simulator, n=8):
    return [simulator.call(TOOL, {"city": f"c{i}"}) for i in range(n)]


def test_the_simulator_section_sets_seed_and_cache(tmp_path):
    cache = tmp_path / "sim" / "responses.sqlite"
    config = TrainConfig.model_validate({"simulator": {"seed": 7, "cache": str(cache)}})
    with contextlib.ExitStack() as stack:
        simulator = build_simulator(config.simulator, stack=stack)
        assert simulator.seed == 7 and simulator.backend.name == "schema"
        got = answers(simulator)
        assert got == answers(Simulator(seed=7)) and got != answers(Simulator(seed=0))
        # one run writes a cache at a time
        with pytest.raises(LockHeld, match="train.simulator.cache"):
            build_simulator(config.simulator, stack=contextlib.ExitStack())
    rows = sqlite3.connect(cache).execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    assert rows == 8
    # the lock went with the stack: the next run reads the cache
    with contextlib.ExitStack() as stack:
        assert answers(build_simulator(config.simulator, stack=stack)) == got


def test_the_default_simulator_is_the_one_every_earlier_run_used():
    default = TrainConfig().simulator
    assert (default.backend, default.seed, default.cache) == ("schema", 0, None)
    assert answers(build_simulator(default)) == answers(Simulator())


def test_simulator_settings_are_checked_at_load():
    with pytest.raises(ValueError, match="backend is 'schema'"):
        TrainConfig.model_validate({"simulator": {"llm": {"model": "/models/x"}}})
    with pytest.raises(ValueError, match="backend"):
        TrainConfig.model_validate({"simulator": {"backend": "remote"}})
    with pytest.raises(ValueError, match="temperature"):
        TrainConfig.model_validate({"simulator": {"backend": "llm", "llm": {"temperature": 0}}})
    with pytest.raises(ValueError, match="judge.model is required"):
        TrainConfig.model_validate({"rewards": {"summary": {"name": "judge"}}})


def test_the_llm_settings_default_to_the_backend_defaults():
    from slca.simulator.llm import LLMBackend

    backend = {f.name: f.default for f in dataclasses.fields(LLMBackend)}
    ours = SimulatorLLMConfig()
    for key in ("model", "engine", "max_new_tokens", "temperature", "top_p"):
        assert getattr(ours, key) == backend[key], key
    assert ours.vllm.memory_share == 0.2


@pytest.mark.slow
def test_the_llm_backend_gets_the_configured_model_and_decoding(smollm2_dir):
    config = SimulatorConfig(
        backend="llm",
        seed=3,
        llm={"model": str(smollm2_dir), "engine": "transformers", "max_new_tokens": 48},
    )
    simulator = build_simulator(config)
    backend = simulator.backend
    assert backend.name == "llm" and backend.engine == "transformers"
    assert backend.max_new_tokens == 48 and simulator.seed == 3
    response = simulator.call(TOOL, {"city": "Paris"})
    assert "error" in response or set(response) >= {"temperature", "sky"}
