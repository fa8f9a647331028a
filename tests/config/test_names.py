"""The names the configuration accepts (slca/config/names.py) and the registries agree,
and the configuration loads without any implementation module."""

import subprocess
import sys

import pytest

from slca.advantages import _REGISTRY, available_estimators, register_advantage
from slca.config.algorithm import AdvantageConfig
from slca.config.names import ESTIMATOR_NAMES, SUMMARY_SCORER_NAMES
from slca.config.rewards import SummaryConfig
from slca.rewards import available_summary_scorers


def test_the_declared_names_are_the_registered_ones():
    # a built-in declared but not implemented would pass the configuration and fail later
    assert sorted(ESTIMATOR_NAMES) == available_estimators()
    assert sorted(SUMMARY_SCORER_NAMES) == available_summary_scorers()


def test_a_plug_in_estimator_is_accepted_while_it_is_registered():
    name = "test_plug_in"
    with pytest.raises(ValueError, match=f"unknown estimator '{name}'"):
        AdvantageConfig(estimator=name)
    try:
        register_advantage(name)(lambda **_: None)
        assert AdvantageConfig(estimator=name).estimator == name
    finally:
        _REGISTRY.unregister(name)
    assert name not in ESTIMATOR_NAMES
    with pytest.raises(ValueError, match=f"unknown estimator '{name}'"):
        AdvantageConfig(estimator=name)
    assert SummaryConfig(name="marker").name == "marker"


def test_the_configuration_imports_no_implementation_and_no_torch():
    code = (
        "import sys\n"
        "import pkgutil, importlib, slca.config\n"
        "for m in pkgutil.iter_modules(slca.config.__path__):\n"
        "    importlib.import_module(f'slca.config.{m.name}')\n"
        # slca/__init__.py pins the CPU kernels (no torch) before anything else loads.
        "outside = [m for m in sys.modules if m.startswith('slca.') "
        "and not m.startswith('slca.config') and m != 'slca.cpu_kernels']\n"
        "assert not outside, outside\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
