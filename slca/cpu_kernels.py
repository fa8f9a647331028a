"""One set of CPU float kernels on every x86-64 machine, so a seed trains the same weights.

ATen, MKL and oneDNN each choose their kernels by the CPU they find. On a CPU with
AVX-512 they run AVX-512 kernels, which add in another order than the AVX2 ones, so the
same code and seed train other weights: the demo base's recipe gave value accuracy 0.569
on an AVX-512 machine and 0.466 on an AVX2 one, and ``make demo`` printed SFT 46 / GRPO
51 against 43 / 55. Pinned to AVX2, the AVX-512 machine computes bit for bit what the
AVX2 machine does (ADR 0094).

Each library reads its variable when it is first used, not when torch is imported, so
``slca/__init__.py`` calls :func:`pin_cpu_kernels` before any of slca's code runs a
tensor op; child processes (DDP workers, vLLM's engine) inherit the environment.
"""

from __future__ import annotations

import os
import platform
import sys
import warnings
from collections.abc import MutableMapping
from pathlib import Path

PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"}
"""The variables and the values that make ATen, MKL and oneDNN take their AVX2 paths."""

OPT_OUT = "SLCA_CPU_KERNELS"
"""Set to ``native`` to leave every library its own choice (faster on some CPUs, but a
run's weights then depend on the CPU)."""


def cpu_has_avx2(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this is an x86-64 Linux CPU that reports AVX2. ATen trusts the variable
    without checking the CPU, so pinning a CPU without AVX2 would crash it; on other
    systems the variables mean nothing or cannot be checked, and are left alone."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    return any(
        line.startswith("flags") and "avx2" in line.split(":", 1)[-1].split()
        for line in text.splitlines()
    )


def pin_cpu_kernels(
    environ: MutableMapping[str, str] = os.environ, avx2: bool | None = None
) -> dict[str, str]:
    """Set each of :data:`PINS` that the environment does not set already, unless
    ``SLCA_CPU_KERNELS=native``; returns what it set. A user's own value always wins."""
    if environ.get(OPT_OUT, "").lower() == "native":
        return {}
    added = {name: value for name, value in PINS.items() if name not in environ}
    # Checked last: a child of a pinned process inherits every pin and skips /proc/cpuinfo.
    if not added or not (cpu_has_avx2() if avx2 is None else avx2):
        return {}
    environ.update(added)
    if added and "torch" in sys.modules:
        _warn_if_torch_chose_already()
    return added


def _warn_if_torch_chose_already() -> None:
    """torch imported before slca is fine; torch having run a CPU op is not: ATen then
    keeps the kernels it chose."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if capability != "AVX2":
        warnings.warn(
            f"torch ran CPU kernels ({capability}) before slca was imported, so they "
            "are not pinned to AVX2 and results may differ from other CPUs; import slca "
            f"first or set {', '.join(f'{k}={v}' for k, v in PINS.items())}",
            RuntimeWarning,
            stacklevel=3,
        )
