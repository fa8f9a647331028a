"""A subflow runs on the document its parent flow read (ADR 0081); run on its own, or
as a deployment, it reads its params file."""

import json

import pytest
from prefect.utilities.callables import parameter_schema

from slca.config import ConfigError
from slca_pipeline.flows.params import load_document

FLOWS = ("data", "simulator_check", "sft", "train", "evaluate")


def test_a_given_document_is_used_without_reading_the_file(tmp_path):
    document = {"train": {"steps": 2}}
    assert load_document(tmp_path / "missing.yaml", None, document) is document
    with pytest.raises(ConfigError, match="params_file: .*missing.yaml is not a file"):
        load_document(tmp_path / "missing.yaml", None, None)


def test_overrides_with_a_read_document_are_refused_not_applied_twice(tmp_path):
    with pytest.raises(ConfigError, match="overrides"):
        load_document(tmp_path / "params.yaml", {"train.steps": 4}, {"train": {}})


@pytest.mark.parametrize("name", FLOWS)
def test_every_subflow_takes_an_optional_json_document(name):
    import importlib

    subflow = getattr(importlib.import_module(f"slca_pipeline.flows.{name}"), name)
    schema = parameter_schema(subflow).model_dump_for_openapi()
    json.dumps(schema)  # a deployment stores it
    assert "document" in schema["properties"] and "document" not in schema.get("required", [])
    given = {"params_file": "params.yaml", "document": {"train": {"steps": 2}}}
    if name == "evaluate":
        given["models"] = {"sft": "models/sft"}
    assert subflow.validate_parameters(given)["document"] == {"train": {"steps": 2}}
