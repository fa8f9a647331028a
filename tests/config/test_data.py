"""The source name a user's file gets, and the names `slca data import --name` takes."""

import pytest

from slca.config.data import PrepareParams, check_import_name, import_name, own_tasks_overrides


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("data/raw/mine.v2.jsonl", "mine"),
        ("My Export (1).jsonl", "My-Export-1"),
        ("/x/synth.jsonl", "synth-own"),
        ("données_été.parquet", "donn-es_-t"),
        ("(((.jsonl", "imported"),
    ],
)
def test_every_file_name_gives_a_source_name_the_pipeline_takes(path, name):
    assert import_name(path) == name
    imports = own_tasks_overrides(path)["prepare.imports"]
    params = PrepareParams.model_validate({"imports": imports})
    assert params.imports[0].name == name


@pytest.mark.parametrize(
    ("name", "why"),
    [("a/b", "letters, digits"), ("-x", "starting with"), ("synth", "built-in source")],
)
def test_a_name_the_pipeline_would_refuse_is_refused_at_import(name, why):
    with pytest.raises(ValueError, match=why):
        check_import_name(name)
    assert check_import_name("team_a.v2") == "team_a.v2"
