"""slca pins torch's CPU kernels to AVX2 where the CPU has it, and only there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slca import cpu_kernels
from slca.cpu_kernels import OPT_OUT, PINS, cpu_has_avx2, pin_cpu_kernels

FLAGS = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []


def test_pins_every_kernel_library_on_an_avx2_cpu() -> None:
    environ: dict[str, str] = {}
    assert pin_cpu_kernels(environ, avx2=True) == PINS
    assert environ == PINS


def test_a_users_own_setting_wins() -> None:
    environ = {"ATEN_CPU_CAPABILITY": "avx512"}
    added = pin_cpu_kernels(environ, avx2=True)
    assert "ATEN_CPU_CAPABILITY" not in added
    assert environ["ATEN_CPU_CAPABILITY"] == "avx512"
    assert environ["MKL_CBWR"] == "AVX2"


def test_a_child_of_a_pinned_process_does_not_read_the_cpu_again(monkeypatch) -> None:
    def unexpected() -> bool:
        raise AssertionError("read /proc/cpuinfo with every pin already set")

    monkeypatch.setattr(cpu_kernels, "cpu_has_avx2", unexpected)
    environ = dict(PINS)
    assert pin_cpu_kernels(environ) == {}
    assert environ == PINS


def test_native_leaves_the_libraries_their_choice() -> None:
    environ = {OPT_OUT: "Native"}
    assert pin_cpu_kernels(environ, avx2=True) == {}
    assert environ == {OPT_OUT: "Native"}


def test_a_cpu_without_avx2_is_left_alone() -> None:
    # ATen would run AVX2 code on it unchecked and die of an illegal instruction.
    environ: dict[str, str] = {}
    assert pin_cpu_kernels(environ, avx2=False) == {}
    assert environ == {}


def test_reads_avx2_from_the_flags_line_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(cpu_kernels.platform, "machine", lambda: "x86_64")
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: avx2 in a name\nflags\t\t: fpu sse2 avx avx512f\n")
    assert not cpu_has_avx2(info)
    info.write_text("flags\t\t: fpu sse2 avx avx2 fma\n")
    assert cpu_has_avx2(info)
    assert not cpu_has_avx2(tmp_path / "missing")
    monkeypatch.setattr(cpu_kernels.platform, "machine", lambda: "aarch64")
    assert not cpu_has_avx2(info)


def _capability(*, env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in PINS and k != OPT_OUT}
    return subprocess.run(
        [sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, check=True
    )


IMPORT_THEN_ASK = "import slca, torch; print(torch.backends.cpu.get_cpu_capability())"


@pytest.mark.skipif(not cpu_has_avx2(), reason="needs an x86-64 Linux CPU with AVX2")
def test_importing_slca_makes_torch_use_avx2_kernels() -> None:
    assert _capability(env={}, code=IMPORT_THEN_ASK).stdout.split() == ["AVX2"]


@pytest.mark.skipif("avx512f" not in FLAGS, reason="needs a CPU with AVX-512")
def test_native_keeps_avx512_and_a_late_import_warns() -> None:
    native = _capability(env={OPT_OUT: "native"}, code=IMPORT_THEN_ASK)
    assert native.stdout.split() == ["AVX512"]
    late = _capability(
        env={}, code="import torch; torch.backends.cpu.get_cpu_capability(); import slca"
    )
    assert "not pinned to AVX2" in late.stderr
