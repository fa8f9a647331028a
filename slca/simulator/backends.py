"""What a simulator backend is: given a valid call, propose a response.

The :class:`~slca.simulator.Simulator` owns everything around a backend —
argument validation, caching, validation of every response against the tool's
``response`` schema, retries and counters — so a backend only proposes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class CallRequest:
    """One valid call to simulate.

    ``tool`` is the task's tool spec: an OpenAI function object (``name``,
    ``description``, ``parameters``) plus ``response``, the JSON Schema of what
    the API returns, or None when the source has none. ``arguments`` already
    validated against ``parameters``. ``context`` is optional task context (e.g.
    ``{"world": {...}}``, the task's world state, and ``"task"``, its request
    text). ``seed`` is derived from the simulator seed, the tool schema hash and
    the canonical arguments; ``attempt`` counts retries from 0, and a backend
    must vary its proposal with it.
    """

    tool: dict[str, Any]
    arguments: dict[str, Any]
    context: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    attempt: int = 0


class Backend(Protocol):
    """Proposes a response for a valid call: a JSON value, or text that should parse as one."""

    name: str

    def propose(self, request: CallRequest) -> Any: ...
