"""The MLflow Model Registry: every final model (SFT and RL) a version of its experiment's
registered model, aliases ``champion`` and ``challenger`` moved after each evaluation,
and ``models:/<name>@<alias>`` (or ``/<version>``) as a model directory to evaluate.

One registered model per experiment, :func:`policy_model_name` (``<experiment>-policy``),
so the arms of a comparison (SFT, GRPO, SLCA, ...) are versions of one model and the
aliases pick among them; a version's tags say which arm it is (``slca.stage``,
``slca.estimator``), the run, the git commit and the training data's digest, and after
an evaluation its figures. The rule the aliases follow is :data:`RULE` (ADR 0083).

On the SQLite store every write here holds the store's writer lock, as every other write
does: registering runs inside the run's own hold (:meth:`Tracker.log_model`), moving the
aliases takes it (refused at once while another process writes).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from slca.tracking.run_file import RUN_FILE, read_run_file

log = logging.getLogger(__name__)

CHAMPION = "champion"
CHALLENGER = "challenger"
RANKING = "eval/in_domain/success_at_0.9"
"""The version tag the champion is chosen by: the evaluation's in-domain Success@0.9."""
RULE = (
    f"{CHAMPION}: the evaluated version with the highest {RANKING} (a tie goes to the "
    f"older version); {CHALLENGER}: the newest evaluated version"
)
"""How the aliases move after every evaluation; a registered-model tag (``slca.alias_rule``)."""
SUMMARY_TAG = "slca.eval.summary"
"""A version's evaluation figures of each set (``<set>/<figure>``), as JSON."""
MOVE_TAG = "slca.alias_moves"
"""A registered-model tag: the last evaluation's alias moves, with their time."""
SUFFIX = "-policy"
CACHE = "registry"
"""Under the tracking directory: registered versions materialised as model directories."""
_URI = re.compile(r"^models:/(?P<name>[^@]*?)(?:@(?P<alias>[^/@]*)|/(?P<version>[^/@]*))$")
_SUMMARY_CHARS = 5000  # MLflow's shortest tag-value limit across stores


def policy_model_name(experiment: str) -> str:
    """The registered model of ``experiment``'s final models, checked against MLflow's
    rule for names; ``ValueError`` naming it (and the experiment) otherwise."""
    return check_model_name(f"{experiment}{SUFFIX}", f"(from experiment {experiment!r})")


def check_model_name(name: str, where: str = "") -> str:
    """``name`` when MLflow accepts it as a registered model's name, else ``ValueError``."""
    from mlflow.utils.validation import _validate_model_name

    try:
        _validate_model_name(name)
    except MlflowException as exc:
        said = f" {where}" if where else ""
        raise ValueError(f"registered model name {name!r}{said}: {exc.message}") from None
    return name


# -- registering -------------------------------------------------------------------------


def register_version(tracker: Any, model_uri: str) -> str:
    """Register the model ``model_uri`` logged by ``tracker``'s run as a version of
    ``tracker.registered_model`` (created when missing), tagged with the run, the git
    commit, the training data's digest and the arm; returns the version. A model already
    registered (a resumed run) is not registered twice. The caller holds the store's
    writer lock (the run's)."""
    client: MlflowClient = tracker.client
    name, run_id = tracker.registered_model, tracker._require_run()
    for version in client.search_model_versions(f"name = '{name}' AND run_id = '{run_id}'"):
        if version.source == model_uri:
            return version.version
    try:
        client.create_registered_model(name, tags={"slca.alias_rule": RULE})
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = client.create_model_version(
        name,
        source=model_uri,
        run_id=run_id,
        tags=version_tags(client.get_run(run_id)),
        model_id=model_uri.removeprefix("models:/"),  # a server checks the source against it
    )
    log.info("registered %s version %s (run %s)", name, version.version, run_id)
    return version.version


def version_tags(run: Any) -> dict[str, str]:
    """A version's provenance from its run: ``slca.run_id``, ``slca.git_commit``,
    ``slca.data_digest`` (the training split's content hash; the pretrain corpus's),
    ``slca.stage`` (``pretrain``, ``sft`` or ``rl``) and
    ``slca.estimator``; the RL run's ``slca.data_hash`` (its train tasks) where set."""
    from slca.tracking.datasets import read_inputs

    tags = run.data.tags
    stage = tags["slca.kind"] if tags.get("slca.kind") in ("sft", "pretrain") else "rl"
    training = [d for d in read_inputs(run.inputs) if d["context"] == "training"]
    # the pretrain stage trains on a generated corpus, not a split: its hash is the digest
    corpus = tags.get("data_hash.corpus.sha256", "unknown")
    digest = ",".join(d["content_sha256"] or d["digest"] for d in training) or corpus
    found = {
        "slca.run_id": run.info.run_id,
        "slca.git_commit": tags.get("mlflow.source.git.commit", "unknown"),
        "slca.data_digest": digest,
        "slca.stage": stage,
        "slca.estimator": tags.get("slca.estimator", stage),
    }
    if "slca.data_hash" in tags:
        found["slca.data_hash"] = tags["slca.data_hash"]
    return found


# -- models:/ URIs -----------------------------------------------------------------------


def is_model_uri(text: str | os.PathLike[str]) -> bool:
    """Whether ``text`` names a registered model (``models:/...``), not a directory."""
    return str(text).startswith("models:/")


def find_version(client: MlflowClient, uri: str, store: str) -> Any:
    """The registered version ``models:/<name>@<alias>`` or ``models:/<name>/<version>``
    names in ``client``'s store; ``ValueError`` naming the URI and what is wrong (a
    malformed URI, a name MLflow refuses, no such model, alias or version)."""
    match = _URI.match(uri)
    if match is None:
        raise ValueError(
            f"{uri}: expected models:/<registered model>@<alias> or models:/<name>/<version>"
        )
    name, alias, number = match["name"], match["alias"], match["version"]
    check_model_name(name, f"in {uri}")
    try:
        model = client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise ValueError(f"{uri}: no registered model {name!r} in {store}") from None
    if alias is not None:
        if alias not in model.aliases:
            known = ", ".join(sorted(model.aliases)) or "none"
            raise ValueError(f"{uri}: {name!r} has no alias {alias!r} (its aliases: {known})")
        number = model.aliases[alias]
    try:
        return client.get_model_version(name, str(number))
    except MlflowException:
        raise ValueError(f"{uri}: {name!r} has no version {number!r} in {store}") from None


def model_directory(
    uri: str, tracking_dir: str | os.PathLike[str] | None, tracking_uri: str | None = None
) -> Path:
    """The registered version ``uri`` names as a model directory (the weights, the
    tokenizer and the run file of the version's run), materialised once under
    ``<tracking_dir>/registry/<name>/<version>``. Its run file names the version, so an
    evaluation of it logs into the version's run and moves the aliases. ``ValueError``,
    naming the URI, before any file is fetched when the store has no such version."""
    from slca.tracking.store import resolve_uri, sqlite_path

    if tracking_dir is None:
        raise ValueError(f"{uri}: a registered model needs a tracking store (tracking_dir)")
    store = resolve_uri(tracking_dir, tracking_uri)
    db = sqlite_path(store)
    if db is not None and not db.is_file():  # reading makes no store
        raise ValueError(f"{uri}: no MLflow store at {db}")
    client = MlflowClient(tracking_uri=store)
    version = find_version(client, uri, store)
    target = Path(tracking_dir) / CACHE / version.name / str(version.version)
    wanted = _run_file(client, version)
    if read_run_file(target) == wanted:  # the same version already fetched
        return target
    if target.exists():  # never removed here: another process may be evaluating from it
        raise ValueError(
            f"{uri}: {target} holds files of another model than version {version.version} "
            f"of {version.name!r}; move it away to fetch this version there"
        )
    Path(tracking_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=Path(tracking_dir)) as tmp:
        staged = _fetch(client, version, Path(tmp), store)
        (staged / RUN_FILE).write_text(json.dumps(wanted, indent=2) + "\n")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            staged.rename(target)
        except OSError:  # another process fetched the same version meanwhile
            if read_run_file(target) != wanted:
                raise
    return target


def _run_file(client: MlflowClient, version: Any) -> dict[str, Any]:
    """The run file of a registered version: its run (and the run's experiment) and the
    version itself."""
    found: dict[str, Any] = {
        "registered_model": version.name,
        "version": str(version.version),
        "source": version.source,
    }
    if version.run_id:
        run = client.get_run(version.run_id)
        found["run_id"] = version.run_id
        found["experiment"] = client.get_experiment(run.info.experiment_id).name
    return found


def _fetch(client: MlflowClient, version: Any, tmp: Path, store: str) -> Path:
    """A Hugging Face directory from a version's ``mlflow.transformers`` files: the
    weights and config (``model/``) with the tokenizer (``components/tokenizer/``)."""
    import mlflow.artifacts

    source = client.get_model_version_download_uri(version.name, str(version.version))
    out = tmp / "model"
    for part in ("model", "components/tokenizer"):
        fetched = mlflow.artifacts.download_artifacts(
            artifact_uri=f"{source.rstrip('/')}/{part}",
            dst_path=str(tmp / part.replace("/", "_")),
            tracking_uri=store,
        )
        shutil.copytree(fetched, out, dirs_exist_ok=True)
    if not (out / "config.json").is_file():
        raise ValueError(
            f"models:/{version.name}/{version.version}: not an mlflow.transformers model "
            f"(no model/config.json under {source})"
        )
    return out


# -- after an evaluation -----------------------------------------------------------------


@dataclass(frozen=True)
class AliasMove:
    """One alias set to another version (``before`` None: it was unset)."""

    alias: str
    before: str | None
    after: str
    score: float

    def line(self, name: str) -> str:
        was = f"v{self.before}" if self.before else "unset"
        return f"{name}@{self.alias}: {was} -> v{self.after} ({RANKING} {self.score:.4f})"


def record_evaluation(
    tracker: Any, model_dir: str | os.PathLike[str], metrics: Mapping[str, float]
) -> list[AliasMove] | None:
    """After ``model_dir`` was evaluated: its registered version (from its run file) gets
    the figures as tags, then the aliases follow :data:`RULE`; each move is a log line
    and the registered model's tag :data:`MOVE_TAG`. ``None`` when the model is no
    version of ``tracker.registered_model`` (nothing is written); else the moves (empty:
    the aliases stayed). The caller holds the store's writer lock (``tracker``'s)."""
    client, name = tracker.client, tracker.registered_model
    version = _evaluated_version(client, name, read_run_file(model_dir))
    if version is None:
        log.info("%s is no version of %s: its aliases stay", model_dir, name)
        return None
    for key, value in evaluation_tags(metrics).items():
        client.set_model_version_tag(name, version, key, value)
    return move_aliases(client, name)


def _evaluated_version(client: MlflowClient, name: str, run: Mapping[str, Any]) -> str | None:
    """The version a run file names (a registry model directory), else the newest version
    registered by its run; None without either."""
    if run.get("registered_model") == name and run.get("version"):
        return str(run["version"])
    if not run.get("run_id"):
        return None
    found = client.search_model_versions(f"name = '{name}' AND run_id = '{run['run_id']}'")
    return str(max(int(v.version) for v in found)) if found else None


def evaluation_tags(metrics: Mapping[str, float]) -> dict[str, str]:
    """A version's evaluation tags: :data:`RANKING` (when the in-domain set ran) and
    :data:`SUMMARY_TAG`, the figures of each set (keys ``<set>/<figure>``) as JSON."""
    finite = {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}
    tags = {}
    ranking = RANKING.removeprefix("eval/")
    if ranking in finite:
        tags[RANKING] = repr(finite[ranking])
    summary = {k: round(v, 4) for k, v in sorted(finite.items()) if k.count("/") == 1}
    text = json.dumps(summary, separators=(",", ":"))
    while len(text) > _SUMMARY_CHARS:  # the longest figures' sets go first
        summary.popitem()
        text = json.dumps(summary, separators=(",", ":"))
    tags[SUMMARY_TAG] = text
    return tags


def move_aliases(client: MlflowClient, name: str) -> list[AliasMove]:
    """Set ``champion`` and ``challenger`` of ``name`` by :data:`RULE` over its evaluated
    versions; returns the moves (each also logged and in :data:`MOVE_TAG`)."""
    scored = {}
    for version in client.search_model_versions(f"name = '{name}'"):
        try:
            score = float(version.tags[RANKING])
        except (KeyError, ValueError):
            continue
        if math.isfinite(score):
            scored[int(version.version)] = score
    if not scored:
        return []
    champion = max(scored, key=lambda v: (scored[v], -v))
    challenger = max(scored)
    current = client.get_registered_model(name).aliases
    moves = []
    for alias, number in ((CHAMPION, champion), (CHALLENGER, challenger)):
        before = current.get(alias)
        if before is not None and str(before) == str(number):
            continue
        client.set_registered_model_alias(name, alias, str(number))
        move = AliasMove(
            alias, None if before is None else str(before), str(number), scored[number]
        )
        log.info("%s", move.line(name))
        moves.append(move)
    if moves:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        text = "; ".join(m.line(name) for m in moves)
        client.set_registered_model_tag(name, MOVE_TAG, f"{stamp} {text}")
        client.set_registered_model_tag(name, "slca.alias_rule", RULE)
    return moves
