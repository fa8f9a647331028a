"""Output directories a step replaces whole: what it may replace and what it refuses."""

from pathlib import Path

import pytest

from slca.data import io
from slca.data.importers import import_to_dir

FIXTURE = Path(__file__).parents[1] / "fixtures" / "imports" / "openai" / "tasks.jsonl"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_an_import_into_a_directory_holding_other_files_deletes_nothing(tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.txt").write_text("four years")
    with pytest.raises(io.OutputConflict, match=r"precious: holds thesis\.txt"):
        import_to_dir(FIXTURE, "openai", out)
    assert _tree(tmp_path) == {"precious/thesis.txt": b"four years"}


def test_an_import_into_the_inputs_own_directory_or_onto_the_input_is_refused(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    data = raw / "mine.jsonl"
    data.write_bytes(FIXTURE.read_bytes())
    for out in (raw, data, tmp_path):
        with pytest.raises(io.OutputConflict, match="holds the input"):
            import_to_dir(data, "openai", out)
    assert _tree(tmp_path) == {"raw/mine.jsonl": FIXTURE.read_bytes()}


def test_the_working_directory_is_never_an_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for out in (".", tmp_path.parent):
        with pytest.raises(io.OutputConflict, match="the working directory"):
            import_to_dir(FIXTURE, "openai", out)
    assert list(tmp_path.iterdir()) == []


def test_an_earlier_import_is_replaced(tmp_path):
    out = tmp_path / "out"
    import_to_dir(FIXTURE, "openai", out, source="first")
    import_to_dir(FIXTURE, "openai", out, source="second")
    records = io.read_records(out / "tasks.parquet")
    assert records and {r.source for r in records} == {"second"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp sibling left


def test_atomic_dir_never_replaces_a_file(tmp_path):
    target = tmp_path / "notes.jsonl"
    target.write_text("mine")
    with pytest.raises(io.OutputConflict, match="a file, not a directory"):
        with io.atomic_dir(target):
            pass
    assert _tree(tmp_path) == {"notes.jsonl": b"mine"}
