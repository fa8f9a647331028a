"""tools/config_reference.py: the configuration reference is generated from the models,
and a key without a description stops the generator, naming it."""

import importlib.util
import sys
from pathlib import Path

import pytest

from slca.config.base import StrictModel

TOOL = Path(__file__).resolve().parents[1] / "tools" / "config_reference.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("config_reference", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_the_committed_page_is_the_rendering_of_the_models(tool):
    assert tool.main(["--check"]) == 0


class Documented(StrictModel):
    rate: float = 0.5
    """How fast."""


class Undocumented(StrictModel):
    rate: float = 0.5
    """How fast."""
    depth: int = 3


def test_a_key_without_a_description_stops_the_generator_naming_it(tool):
    assert tool._rows(Documented, "x", {}, missing := []) and missing == []
    tool._rows(Undocumented, "x", {"depth": 4}, missing := [])
    assert missing == [f"{__name__}.Undocumented.depth (x.depth)"]


def test_render_refuses_an_undocumented_key_unless_allowed(tool, monkeypatch, capsys):
    monkeypatch.setitem(tool.SECTIONS, "prepare", f"{__name__}:Undocumented")
    with pytest.raises(SystemExit, match=r"Undocumented\.depth \(prepare\.depth\)"):
        tool.render()
    page = tool.render(allow_missing=True)
    assert "prepare.depth" in page
    assert "Undocumented.depth" in capsys.readouterr().out
