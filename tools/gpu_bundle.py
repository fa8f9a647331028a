"""The GPU bundle (``.gpu/``, issue 35): what a GPU machine's Python lacks, cut into parts
that each travel in one call of the GPU lending tool, and a manifest that every part is
checked against before it is used.

One call carries at most 64 MiB: the repository's tree plus the paths it names. ``make
gpu-bundle`` (where PyPI is reachable) fills ``.gpu/``, writes ``.gpu/manifest.json``
(every file's size and sha256, by part) and prints the transfer plan: which parts to
carry in which call so that every call, tree included, stays 8 MiB under the cap (the
tree grows between bundling and carrying). On the GPU machine ``make gpu-site`` installs
the running Python's wheel set and ``make gpu-join`` joins the GGUF; each checks its
parts first (sizes, then hashes) and stops with one line naming a missing or corrupt
part, or a Python the bundle has no wheels for.

Standard library only: it runs on the GPU machine's own Python before anything is
installed there.

    python tools/gpu_bundle.py wheels .gpu      # download the wheel sets (needs PyPI)
    python tools/gpu_bundle.py manifest .gpu    # write .gpu/manifest.json, print the plan
    python tools/gpu_bundle.py plan .gpu        # print the plan again
    python tools/gpu_bundle.py site .gpu        # check, then install this Python's wheels
    python tools/gpu_bundle.py join .gpu        # check every part, join the GGUF
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MiB = 2**20
CALL_LIMIT = 64 * MiB
"""What one call of the GPU lending tool carries: the tree and the paths it names."""
MARGIN = 8 * MiB
"""Left free in every call of the plan: the tree grows between bundling and carrying."""
PART_LIMIT = 32 * MiB
"""The GGUF is cut into pieces of at most this (98 MB: 3 pieces of 31.3 MiB), so that one
piece, the tree and some smaller parts share a call."""
MAX_PATHS = 8
"""Paths one call may name (``carry``)."""
MANIFEST = "manifest.json"
JOINED = "smollm2.gguf"
"""The joined GGUF in the bundle (``make gpu-join``); its pieces are ``JOINED.part<i>``."""
SITE = "site"
"""Where ``make gpu-site`` installs the wheels (not a part: made on the GPU machine)."""

PYTHONS = ("3.11", "3.12")
"""The Pythons the bundle has wheels for: the GPU image's (3.12.3) and 3.11, in case the
image changes. Not 3.10: slca needs 3.11 (pyproject's requires-python; slca/grammar.py's
possessive quantifiers fail to compile on 3.10), so a 3.10 image stops at ``gpu-site``."""
WHEELS = (
    # slca's own needs, besides what the GPU image has (tools/gpu_check.py, IMAGE_MODULES)
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "typing-extensions==4.16.0",
    "jsonschema-rs==0.61.2",
    "rstr==3.2.2",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "attrs==26.1.0",  # referencing's and jsonschema's
    # transformers loads a GGUF only with gguf and accelerate (accelerate needs psutil)
    "gguf==0.19.0",
    "accelerate==1.16.0",
    "psutil==7.2.2",
)
"""The pinned wheels (the versions the dev venv runs), downloaded ``--no-deps``: torch,
transformers and their own requirements (numpy, pyyaml, tqdm, ...) are the image's."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


class BundleError(Exception):
    """What is wrong with the bundle, in one line."""


# --- the parts and the manifest ----------------------------------------------------------


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(MiB):
            digest.update(block)
    return digest.hexdigest()


def mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB"


def wheel_tag(version: str) -> str:
    """``cp312`` for ``3.12``: the folder of that Python's compiled wheels."""
    return f"cp{version.replace('.', '')}"


def split_gguf(source: Path, directory: Path) -> list[Path]:
    """``source`` as ``JOINED.part1..n`` in ``directory``, each at most PART_LIMIT."""
    for old in directory.glob(f"{JOINED}.part*"):
        old.unlink()
    size = source.stat().st_size
    count = max(1, math.ceil(size / PART_LIMIT))
    piece = math.ceil(size / count)
    parts = []
    with source.open("rb") as f:
        for i in range(1, count + 1):
            part = directory / f"{JOINED}.part{i}"
            part.write_bytes(f.read(piece))
            parts.append(part)
    return parts


def find_parts(directory: Path) -> dict[str, list[Path]]:
    """The bundle's parts by the path a call carries (relative to ``directory``): each
    wheel set, ``deepspeed``, ``smollm2`` and each GGUF piece."""
    skip = {MANIFEST, SITE, JOINED}
    parts: dict[str, list[Path]] = {}
    for entry in sorted(directory.iterdir()):
        if entry.name in skip or entry.name.startswith("."):
            continue
        if entry.name == "wheels":
            for wheels in sorted(p for p in entry.iterdir() if p.is_dir()):
                parts[f"wheels/{wheels.name}"] = sorted(wheels.rglob("*.whl"))
        elif entry.is_dir():
            parts[entry.name] = sorted(p for p in entry.rglob("*") if p.is_file())
        else:
            parts[entry.name] = [entry]
    return parts


def gguf_pieces(names) -> list[str]:
    pieces = [n for n in names if n.startswith(f"{JOINED}.part")]
    return sorted(pieces, key=lambda n: int(n.rsplit("part", 1)[1]))


def write_manifest(directory: Path) -> dict:
    """Every part's files with their sizes and sha256, and the joined GGUF's."""
    parts = {
        name: {
            p.relative_to(directory).as_posix(): {"size": p.stat().st_size, "sha256": sha256(p)}
            for p in paths
        }
        for name, paths in find_parts(directory).items()
    }
    manifest: dict = {"schema": 1, "pythons": list(PYTHONS), "parts": parts, "joined": {}}
    pieces = gguf_pieces(parts)
    if pieces:
        digest, size = hashlib.sha256(), 0
        for name in pieces:
            data = (directory / name).read_bytes()
            digest.update(data)
            size += len(data)
        manifest["joined"][JOINED] = {"parts": pieces, "size": size, "sha256": digest.hexdigest()}
    tmp = directory / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, directory / MANIFEST)
    return manifest


def load_manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise BundleError(
            f"gpu bundle: {path} is missing: carry it (`make gpu-bundle` writes it)"
        ) from None
    except json.JSONDecodeError:
        raise BundleError(f"gpu bundle: {path} is corrupt: carry it again") from None


def check(directory: Path, names: list[str] | None = None) -> dict:
    """Raise :class:`BundleError` naming the first missing or corrupt part among ``names``
    (default: every part); returns the manifest. Sizes first, for every part (a lost or
    cut transfer shows at once), then hashes."""
    manifest = load_manifest(directory)
    parts = manifest["parts"]
    names = list(parts) if names is None else names
    for name in names:
        if name not in parts:
            raise BundleError(f"gpu bundle: the manifest has no part {name}: run `make gpu-bundle`")
    carry = lambda name: f"carry {directory / name}"  # noqa: E731
    for name in names:
        for rel, want in parts[name].items():
            path = directory / rel
            if not path.is_file():
                raise BundleError(f"gpu bundle: part {name} is missing ({path}): {carry(name)}")
            size = path.stat().st_size
            if size != want["size"]:
                raise BundleError(
                    f"gpu bundle: part {name} is corrupt: {path} has {size} bytes, the "
                    f"manifest {want['size']} (a cut transfer?): {carry(name)} again"
                )
    for name in names:
        for rel, want in parts[name].items():
            if sha256(directory / rel) != want["sha256"]:
                raise BundleError(
                    f"gpu bundle: part {name} is corrupt: {directory / rel}'s sha256 is not "
                    f"the manifest's: {carry(name)} again"
                )
    return manifest


# --- on the GPU machine ------------------------------------------------------------------


def join(directory: Path) -> Path:
    """Check every part, then join the GGUF pieces into ``directory/JOINED`` (written,
    checked against the manifest's hash, then renamed)."""
    manifest = check(directory)
    entry = manifest["joined"].get(JOINED)
    if entry is None:
        raise BundleError("gpu bundle: the manifest lists no GGUF pieces: run `make gpu-bundle`")
    out = directory / JOINED
    if out.is_file() and out.stat().st_size == entry["size"] and sha256(out) == entry["sha256"]:
        return out
    tmp = directory / f".{JOINED}.tmp"
    digest = hashlib.sha256()
    with tmp.open("wb") as f:
        for name in entry["parts"]:
            data = (directory / name).read_bytes()
            digest.update(data)
            f.write(data)
    if digest.hexdigest() != entry["sha256"]:
        tmp.unlink()
        raise BundleError(f"gpu bundle: the joined {JOINED} is not the manifest's: run it again")
    os.replace(tmp, out)
    return out


def site(directory: Path, target: Path | None = None) -> Path:
    """Check the running Python and its parts, then install its wheels under ``target``
    (``directory/site``); skipped when that manifest's set is installed there already."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if version not in PYTHONS:
        raise BundleError(
            f"gpu bundle: Python {platform.python_version()} ({sys.executable}) is not "
            f"supported: the bundle has wheels for Python {', '.join(PYTHONS)}"
        )
    names = ["wheels/common", f"wheels/{wheel_tag(version)}"]
    names += ["deepspeed"] if "deepspeed" in load_manifest(directory)["parts"] else []
    manifest = check(directory, names)
    target = target or directory / SITE
    stamp = target / ".installed"
    key = sha256(directory / MANIFEST) + " " + version
    if stamp.is_file() and stamp.read_text() == key:
        return target
    # the manifest's files, not a glob: a stray wheel of another version stops pip
    wheels = [directory / rel for name in names for rel in manifest["parts"][name]]
    target.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    pip += ["--no-compile", "--upgrade", "--disable-pip-version-check", "--target", str(target)]
    env = {**os.environ, "PIP_ROOT_USER_ACTION": "ignore"}  # root on the GPU machine
    subprocess.run([*pip, *map(str, wheels)], check=True, env=env)
    stamp.write_text(key)
    return target


# --- where PyPI is reachable ---------------------------------------------------------------


def download_wheels(directory: Path) -> None:
    """Each Python's wheels into ``directory/wheels``: those every Python shares (pure or
    abi3) once in ``common``, the rest in ``cp3XX``."""
    wheels = directory / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    got: dict[str, dict[str, Path]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for version in PYTHONS:
            dest = Path(tmp) / version
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check"]
            cmd += ["--no-deps", "--only-binary=:all:", "--implementation", "cp"]
            cmd += ["--python-version", version, "-d", str(dest)]
            cmd += [f"--platform={p}" for p in PLATFORMS]
            subprocess.run([*cmd, *WHEELS], check=True)
            got[version] = {p.name: p for p in dest.glob("*.whl")}
        common = set.intersection(*(set(files) for files in got.values()))
        for version, files in got.items():
            for name, path in files.items():
                dest = wheels / ("common" if name in common else wheel_tag(version))
                dest.mkdir(parents=True, exist_ok=True)
                if not (dest / name).exists():
                    shutil.copy2(path, dest / name)


# --- the transfer plan -----------------------------------------------------------------------


def tree_size(repo: Path) -> int:
    """The bytes of the tree a call sends: tracked and untracked-not-ignored files."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.decode()
    paths = (repo / name for name in listing.split("\0") if name)
    return sum(p.lstat().st_size for p in paths if os.path.lexists(p))


def plan(parts: dict[str, int], tree: int, limit: int = CALL_LIMIT - MARGIN) -> list[list[str]]:
    """The parts in calls, each call's parts and the tree together at most ``limit``.
    Largest part first, each into the call with the most room (a new call when none has
    enough): the GGUF pieces each open a call and the small parts spread over them, so
    that every call keeps some room for a tree that grew since."""
    room = limit - tree
    calls: list[list[str]] = []
    used: list[int] = []
    for name in sorted(parts, key=lambda n: (-parts[n], n)):
        if parts[name] > room:
            raise BundleError(
                f"gpu bundle: part {name} ({mib(parts[name])}) does not fit one call beside "
                f"the tree ({mib(tree)}) under {mib(limit)}"
            )
        fits = [i for i, call in enumerate(calls) if used[i] + parts[name] <= room]
        fits = [i for i in fits if len(calls[i]) < MAX_PATHS]
        if fits:
            i = min(fits, key=lambda i: used[i])
            calls[i].append(name)
            used[i] += parts[name]
        else:
            calls.append([name])
            used.append(parts[name])
    return calls


def part_sizes(directory: Path) -> dict[str, int]:
    """What each carried path weighs, the manifest itself included."""
    manifest = load_manifest(directory)
    sizes = {
        name: sum(f["size"] for f in files.values()) for name, files in manifest["parts"].items()
    }
    sizes[MANIFEST] = (directory / MANIFEST).stat().st_size
    return sizes


def print_plan(directory: Path, repo: Path) -> list[list[str]]:
    sizes, tree = part_sizes(directory), tree_size(repo)
    calls = plan(sizes, tree)
    rel = os.path.relpath(directory, repo)
    print(
        f"gpu bundle: {len(calls)} calls carry it (tree {mib(tree)}; each call at most "
        f"{mib(CALL_LIMIT - MARGIN)} of the {mib(CALL_LIMIT)} it may carry):"
    )
    for i, call in enumerate(calls, 1):
        total = tree + sum(sizes[n] for n in call)
        listed = ", ".join(f"{rel}/{n} ({mib(sizes[n])})" for n in call)
        print(f"  call {i} ({mib(total)}): {listed}")
        print(f"    carry: {json.dumps([f'{rel}/{n}' for n in call])}")
    print("  then, on the GPU machine: make gpu-site gpu-join, and make gpu-check")
    return calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["wheels", "manifest", "plan", "site", "join"])
    parser.add_argument("directory", type=Path, help="the bundle (.gpu)")
    parser.add_argument("--target", type=Path, help="site: where to install (default DIR/site)")
    args = parser.parse_args(argv)
    repo = Path(__file__).resolve().parents[1]
    try:
        if args.command == "wheels":
            download_wheels(args.directory)
        elif args.command == "manifest":
            write_manifest(args.directory)
            print_plan(args.directory, repo)
        elif args.command == "plan":
            print_plan(args.directory, repo)
        elif args.command == "site":
            site(args.directory, args.target)
        else:
            print(f"gpu bundle: joined {join(args.directory)}")
    except BundleError as exc:
        print(exc, file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"gpu bundle: {exc.cmd[2]} {exc.cmd[3]} failed ({exc.returncode})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
