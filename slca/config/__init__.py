"""slca's configuration: one model per params.yaml section, one base, one loader.

Every section model derives from :class:`~slca.config.base.StrictModel` (unknown keys
refused, frozen, every field documented where it is defined) and is read by
:func:`~slca.config.loader.load_section` (the file, then ``-S key=value`` overrides,
then validation; an error is one line naming the file, the key and the constraint).
A preset (``configs/presets/<name>.yaml``, ``--preset`` in every entry point) is a
params overlay applied before the ``-S`` overrides (:func:`~slca.config.loader.with_preset`).
One module per section:

- ``data``: ``prepare`` and ``validate`` (torch-free, as the data stages are);
- ``simulator``: ``simulator_check`` and ``train.simulator`` (torch-free);
- ``rewards``: ``train.rewards`` and ``evaluate.rewards`` (torch-free);
- ``vllm``: one vLLM engine's settings, wherever a section runs one (torch-free);
- ``engine``: ``train.engine`` and ``sft.engine``;
- ``algorithm``: ``train.algorithm`` and the ``reference`` profile;
- ``train``: the ``train`` section;
- ``evaluate``: the ``evaluate`` section.

This package imports only the base and the loader (both torch-free); import a
section from its module (``from slca.config.train import TrainConfig``).
"""

from slca.config.base import StrictModel
from slca.config.loader import (
    SECTIONS,
    ConfigError,
    add_override_option,
    describe,
    load_section,
    overrides_of,
    parse_override,
    parse_section,
    read_params,
    with_preset,
)

__all__ = [
    "SECTIONS",
    "ConfigError",
    "StrictModel",
    "add_override_option",
    "describe",
    "load_section",
    "overrides_of",
    "parse_override",
    "parse_section",
    "read_params",
    "with_preset",
]
