"""slca: Segment-Locked Credit Assignment for tool-calling policies."""

from slca.cpu_kernels import pin_cpu_kernels

# Before any of slca's code runs a tensor op: see slca/cpu_kernels.py.
pin_cpu_kernels()
