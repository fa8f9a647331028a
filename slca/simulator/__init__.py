"""SGLS: the schema-guided simulator of tool APIs (DESIGN §5)."""

from slca.simulator.backends import Backend, CallRequest
from slca.simulator.core import (
    ERROR_CODES,
    Simulator,
    SimulatorLimits,
    SimulatorStats,
    error,
    is_error,
)
from slca.simulator.schema_backend import SchemaBackend, SchemaGenerationError

__all__ = [
    "ERROR_CODES",
    "Backend",
    "CallRequest",
    "SchemaBackend",
    "SchemaGenerationError",
    "Simulator",
    "SimulatorLimits",
    "SimulatorStats",
    "error",
    "is_error",
]
