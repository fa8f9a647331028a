import pytest

from slca.config.data import SynthParams
from slca.data.synth import generate
from slca.training.tiny import train_tokenizer


@pytest.fixture(scope="session")
def tasks():
    return generate(SynthParams(n_tasks=24), seed=4)


@pytest.fixture(scope="session")
def tokenizer(tasks):
    texts = [m.content for t in tasks for m in t.messages]
    texts += [str(t.model_dump()["tools"]) for t in tasks]
    return train_tokenizer(texts, vocab_size=600)
