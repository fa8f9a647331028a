"""The task-data sections of ``params.yaml``: ``prepare`` and ``validate``.

Torch-free (the data stages import no torch). Every field is checked when loaded
(unknown keys are errors), so a typo fails loudly instead of being silently ignored.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from slca.config.base import StrictModel, known_names

TaskKind = Literal["single", "parallel", "multi_step", "no_call"]
SourceName = Literal["synth", "nestful", "bfcl", "tau2"]

BFCL_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
)
BFCL_MULTI_TURN = ("multi_turn_base",)
"""The BFCL multi-turn categories evaluation reads from bfcl-eval itself (never imported)."""
NESTFUL_SUBSETS = ("executable", "glaive", "sgd", "complexfuncbench")
TAU2_DOMAINS = ("airline", "retail", "telecom")
SYNTH_DOMAINS = ("weather", "currency", "flights", "shop")
"""The controlled generator's domains: the keys of ``slca.data.synth.DOMAINS``."""


class SynthParams(StrictModel):
    """The controlled generator (``slca.data.synth``)."""

    n_tasks: int = Field(2000, gt=0, description="How many tasks to generate.")
    domains: list[str] = Field(
        default_factory=lambda: ["weather", "currency", "flights", "shop"],
        min_length=1,
        description="Domains to draw tasks from (names in SYNTH_DOMAINS).",
    )
    mix: dict[TaskKind, float] = Field(
        default_factory=lambda: {
            "single": 0.4,
            "parallel": 0.25,
            "multi_step": 0.25,
            "no_call": 0.1,
        },
        description="Relative weight of each task kind (the difficulty mix); normalised.",
    )
    max_parallel: int = Field(3, ge=2, le=5, description="Most calls in one parallel step.")
    max_distractors: int = Field(
        2, ge=0, description="Most tools from other domains added to a task's tool list."
    )
    values: Literal["demo", "wide"] = Field(
        "demo",
        description="demo: cities, airports and passengers from short fixed lists. wide: "
        "three in four made up from syllables or letters, so a model trained on them "
        "must copy a value from the request rather than recall it (the pretrain corpus).",
    )

    @field_validator("mix")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in v.values()) or sum(v.values()) <= 0:
            raise ValueError("weights must be >= 0 with a positive sum")
        return v

    @field_validator("domains")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        return known_names(v, SYNTH_DOMAINS, "domains")


class SplitParams(StrictModel):
    """Fractions of in-domain records per split (by near-duplicate group)."""

    train: float = Field(0.8, ge=0, le=1)
    """Share of groups the SFT and RL stages train on."""
    val: float = Field(0.1, ge=0, le=1)
    """Share held out for choosing settings (validation curves, the value probe)."""
    test: float = Field(0.1, ge=0, le=1)
    """Share held out for the final evaluation; never read while choosing settings."""

    @model_validator(mode="after")
    def _sum_to_one(self) -> SplitParams:
        if abs(self.train + self.val + self.test - 1.0) > 1e-9:
            raise ValueError("train + val + test must be 1")
        return self


class NestfulParams(StrictModel):
    subsets: list[Literal["executable", "glaive", "sgd", "complexfuncbench"]] = Field(
        default_factory=lambda: list(NESTFUL_SUBSETS),
        description="NESTFUL subsets to import (in-domain).",
    )


class BfclParams(StrictModel):
    categories: list[str] = Field(
        default_factory=lambda: list(BFCL_CATEGORIES),
        description="BFCL v4 categories to import (eval-only).",
    )

    @field_validator("categories")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        return known_names(v, BFCL_CATEGORIES, "BFCL categories")


class Tau2Params(StrictModel):
    domains: list[Literal["airline", "retail", "telecom"]] = Field(
        default_factory=lambda: list(TAU2_DOMAINS), description="τ² domains (eval-only)."
    )
    task_split: str = Field(
        "base",
        description="τ² task split to take (split_tasks.json key; 'base' = all of "
        "airline/retail and the 114 standard telecom tasks).",
    )


ImportFormat = Literal["auto", "openai", "toucan", "verl", "xlam", "sharegpt"]
"""Users' tool-calling data formats (``slca.data.importers``); ``auto`` detects one."""


IMPORT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
"""What an imported source may be called: its tasks' ``source`` and id prefix."""


class ImportSpec(StrictModel):
    """One file (or ``datasets`` directory) of the user's own tasks, imported by
    ``prepare`` beside the built-in sources (``slca data import`` does the same alone)."""

    name: str = Field(
        pattern=IMPORT_NAME_PATTERN,
        description="The tasks' source name (their ``source`` and id prefix); unique.",
    )
    path: str = Field(
        min_length=1,
        description="JSONL, JSON, parquet, or a datasets.save_to_disk directory. A DVC "
        "dependency of prepare: keep it under data/raw/ (dvc.yaml lists that directory).",
    )
    format: ImportFormat = Field("auto", description="The file's format; auto detects it.")
    split: Literal["auto", "train", "eval"] = Field(
        "auto",
        description="auto: train/val/test by the seeded near-duplicate split, like the "
        "built-in sources; train: all for training; eval: an evaluation-only set.",
    )


SCHEMA_DEPTH_CEILING = 64
"""The deepest ``prepare.limits.max_schema_depth`` may allow: deeper, the JSON Schema
meta-check recurses past Python's stack."""


class DataLimits(StrictModel):
    """How large one task may be (``slca.data.limits``). ``prepare`` and ``slca data
    import`` reject a task over a limit (a reject line, reason ``over_limit``); the
    manifest records the limits when they differ from these defaults, and every reader
    of the stored data (validate, the simulator check, SFT, training, evaluation) refuses
    a task over its manifest's limits with one line naming the file, task and field. A
    schema nested thousands deep would crash those readers (Python's recursion limit),
    and a megabyte description multiplies training's memory."""

    max_schema_depth: int = Field(
        32,
        ge=1,
        le=SCHEMA_DEPTH_CEILING,
        description="Most levels a tool's parameters or response schema may nest: the root "
        "is level 1, a schema inside properties, items or anyOf one deeper (the deepest "
        "real source, NESTFUL's response schemas, reaches 30). At most 64: past that the "
        "JSON Schema meta-check recurses beyond Python's stack.",
    )
    max_description_bytes: int = Field(
        65536, ge=1, description="Largest tool description, in UTF-8 bytes (64 KiB)."
    )
    max_task_bytes: int = Field(
        1048576,
        ge=1,
        description="Largest task, in UTF-8 bytes of its stored JSON: prompt, tools, gold, "
        "facts, world and answer together (1 MiB).",
    )


class PrepareParams(StrictModel):
    """The ``prepare`` stage: import, split, write parquet + manifest."""

    seed: int = Field(13, description="Seeds the generator and the split assignment.")
    sources: list[SourceName] = Field(
        default_factory=lambda: ["synth", "nestful", "bfcl", "tau2"],
        description="Built-in sources to import (may be empty when ``imports`` is not).",
    )
    out_dir: str = Field("data/tasks", description="Where parquet files and manifest go.")
    skip_invalid: bool = Field(
        True, description="Quarantine malformed records into rejects.jsonl instead of stopping."
    )
    imports: list[ImportSpec] = Field(
        default_factory=list,
        description="The user's own task files, imported beside ``sources``; each row is "
        "imported or rejected with its reason (rejects.jsonl).",
    )
    max_reject_frac: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Fail prepare when an import rejects more than this share of its rows "
        "(the error names the file and the top reasons).",
    )
    limits: DataLimits = Field(
        default_factory=DataLimits,
        description="How large a task may be; recorded in the manifest when not the "
        "defaults, and held to by every stage that reads the data.",
    )
    synth: SynthParams = Field(default_factory=SynthParams)
    """The controlled generator (source ``synth``): how many tasks, which domains, what mix."""
    splits: SplitParams = Field(default_factory=SplitParams)
    """Train/val/test fractions of the in-domain records, assigned by near-duplicate group."""
    nestful: NestfulParams = Field(default_factory=NestfulParams)
    """Which NESTFUL subsets to import (source ``nestful``)."""
    bfcl: BfclParams = Field(default_factory=BfclParams)
    """How BFCL's categories are imported (source ``bfcl``; evaluation only)."""
    tau2: Tau2Params = Field(default_factory=Tau2Params)
    """How τ²-bench's domains are imported (source ``tau2``; evaluation only)."""

    @field_validator("imports")
    @classmethod
    def _unique_import_names(cls, v: list[ImportSpec]) -> list[ImportSpec]:
        names = [spec.name for spec in v]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"import name {name!r} is given twice")
            check_import_name(name)  # the rule `slca data import --name` holds to
        return v

    @model_validator(mode="after")
    def _some_data(self) -> PrepareParams:
        if not self.sources and not self.imports:
            raise ValueError("sources and imports are both empty: nothing to prepare")
        return self


class ValidateParams(StrictModel):
    """The ``validate`` stage: Great Expectations over what ``prepare`` wrote."""

    in_dir: str = Field("data/tasks", description="Output of prepare.")
    report_dir: str = Field("data/validation", description="GE results (JSON, Data Docs).")
    max_examples: int = Field(5, ge=1, description="Record ids quoted per failed expectation.")
    min_rows: dict[Literal["train", "val", "test", "eval"], int] = Field(
        default_factory=lambda: {"train": 1, "val": 1, "test": 1},
        description="Fewest rows each split must hold; a missing or smaller split fails "
        "validation (an empty train split would train on nothing).",
    )

    @field_validator("min_rows")
    @classmethod
    def _non_negative(cls, v: dict[str, int]) -> dict[str, int]:
        if any(n < 0 for n in v.values()):
            raise ValueError("row counts must be >= 0")
        return v


def import_name(path: str) -> str:
    """The source name a file's tasks get when none is given: its name up to the first
    dot (``data/raw/mine.v2.jsonl`` -> ``mine``), what a name may not hold made ``-``
    (``My Export (1).jsonl`` -> ``My-Export-1``), a built-in source's name suffixed
    (``synth.jsonl`` -> ``synth-own``): a file's name never makes a run fail."""
    from pathlib import Path

    stem = Path(path).name.split(".")[0]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-_.") or "imported"
    return f"{name}-own" if name in SourceName.__args__ else name


def check_import_name(name: str) -> str:
    """``name`` if a source may be called so, else a ``ValueError`` saying why (the
    pattern of :attr:`ImportSpec.name`, not a built-in source's name)."""
    if not re.fullmatch(IMPORT_NAME_PATTERN, name):
        raise ValueError(
            f"source name {name!r}: letters, digits, '_', '.' and '-' only, starting with "
            "a letter or digit"
        )
    if name in SourceName.__args__:
        raise ValueError(f"source name {name!r} is a built-in source's name")
    return name


def own_tasks_overrides(path: str, name: str | None = None) -> dict[str, object]:
    """The dotted overrides that train and evaluate on one file of the user's own tasks
    (``slca run --tasks PATH``): imported by ``prepare`` with the seeded split, and the
    only source SFT, RL and in-domain evaluation draw from."""
    name = name or import_name(path)
    return {
        "prepare.imports": [{"name": name, "path": str(path), "format": "auto", "split": "auto"}],
        "simulator_check.sources": [name],
        "sft.sources": [name],
        "train.sources": [name],
        "evaluate.in_domain.sources": [name],
    }
