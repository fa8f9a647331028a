"""Segment labels: characters → spans → tokens → reward-head masks (DESIGN §3).

The chain is
``label_turn`` (character spans of one turn) →
``label_turn_tokens`` (one label per sampled token, from character offsets of
the decoded ids, never from re-tokenising the text) →
``head_masks`` (bool masks per reward head, through a configurable routing).
Tokens the policy did not write (prompt, template, ``<tool_response>`` text)
carry :data:`ENV` and belong to no head.

``head_masks(..., mode="mask_runs")`` is the authors' segmenting instead (the
``reference`` profile): the last contiguous run of policy tokens is the summary,
every earlier run the tool segment, whatever the tokens say (:func:`mask_run_masks`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from slca.config.names import (
    DEFAULT_ROUTING,
    SEGMENT_KINDS,
    SEGMENT_MODES,
    SegmentMode,
    validate_routing,
)
from slca.grammar import lex_turn

KIND_CODE: dict[str, int] = {kind: code for code, kind in enumerate(SEGMENT_KINDS)}
ENV = -1
"""Code of tokens the policy did not write; they get no advantage and no loss."""

_REGION_KIND = {"think": "reasoning", "tool_call": "tool_call"}


def label_turn(text: str, *, final: bool) -> list[tuple[str, int, int]]:
    """Character spans ``(kind, start, end)`` of one assistant turn.

    Ordered, non-overlapping, non-empty and covering ``[0, len(text))``; never
    raises for any ``str``. Plain text is ``summary`` only in a final turn that
    contains no ``<tool_call>`` block (well-formed or not), else ``preamble``.
    Each call block is its own span, so per-call credit can find it.
    """
    regions = lex_turn(text)
    has_call = any(region.kind == "tool_call" for region in regions)
    text_kind = "summary" if final and not has_call else "preamble"
    return [(_REGION_KIND.get(r.kind, text_kind), r.start, r.end) for r in regions]


_MAX_PENDING = 16
"""Tokens held back for an incomplete character before their text is emitted as is.

A UTF-8 character is at most 4 bytes, so only degenerate output (runs of invalid
bytes) reaches this; the bound keeps decoding linear instead of re-decoding an
ever longer window.
"""


def token_offsets(
    decode: Callable[[Sequence[int]], str],
    ids: Sequence[int],
    *,
    prefix: Sequence[int] = (),
    window: int = 4,
) -> tuple[str, list[tuple[int, int]]]:
    """Decode ``ids`` incrementally; return the text and each token's ``(start, end)`` in it.

    ``decode`` must keep special tokens (e.g. ``lambda ids: tok.decode(ids,
    skip_special_tokens=False)``). ``prefix`` is the context the ids follow (the
    prompt), so tokenizers that drop a leading space at the start of a decode see
    the same context the model did. This is the incremental detokeniser of vLLM:
    each step decodes a short window and keeps the new characters; a token that
    ends inside a multi-byte character emits nothing until the character is
    complete, and then every token that contributed to it shares its span.
    The returned text is the concatenation of the increments; it equals
    ``decode(ids)`` except after runs of more than 16 tokens that never complete
    a character (invalid bytes), whose replacement characters may differ.
    """
    context = list(prefix[-window:]) if window > 0 else []
    all_ids = context + list(ids)
    prefix_at, read_at = 0, len(context)
    pieces: list[str] = []
    offsets: list[tuple[int, int]] = []
    length = 0
    pending = 0  # tokens decoded but not yet assigned characters
    prefix_text = decode(all_ids[prefix_at:read_at])
    for k in range(len(context), len(all_ids)):
        pending += 1
        new_text = decode(all_ids[prefix_at : k + 1])
        incomplete = new_text.endswith("\ufffd") and pending < _MAX_PENDING
        if len(new_text) > len(prefix_text) and not incomplete:
            piece = new_text[len(prefix_text) :]
            pieces.append(piece)
            offsets.extend([(length, length + len(piece))] * pending)
            length += len(piece)
            pending = 0
            prefix_at, read_at = read_at, k + 1
            prefix_text = decode(all_ids[prefix_at:read_at])
        elif len(new_text) <= len(prefix_text) and not incomplete:
            # The token decodes to nothing (a skipped special token): empty span.
            offsets.extend([(length, length)] * pending)
            pending = 0
    if pending:
        # Trailing incomplete bytes: decode renders them as U+FFFD; keep that text.
        tail = decode(all_ids[prefix_at:])[len(prefix_text) :]
        pieces.append(tail)
        offsets.extend([(length, length + len(tail))] * pending)
    return "".join(pieces), offsets


def label_tokens(
    offsets: Sequence[tuple[int, int]],
    spans: Sequence[tuple[str, int, int]],
    *,
    empty_kind: str,
) -> list[str]:
    """One kind per token: the span the token overlaps most (ties: the earlier span).

    A token with an empty offset range (it decodes to no characters) takes the
    kind of the character before it; with no characters at all, ``empty_kind``.
    Offsets must be sorted, as :func:`token_offsets` returns them. O(tokens + spans).
    """
    kinds: list[str] = []
    first = 0
    for start, end in offsets:
        if end <= start:
            kinds.append(_kind_at(spans, start - 1) or _kind_at(spans, start) or empty_kind)
            continue
        while first < len(spans) and spans[first][2] <= start:
            first += 1
        best_kind, best_overlap = empty_kind, 0
        j = first
        while j < len(spans) and spans[j][1] < end:
            kind, s, e = spans[j]
            overlap = min(e, end) - max(s, start)
            if overlap > best_overlap:
                best_kind, best_overlap = kind, overlap
            j += 1
        kinds.append(best_kind)
    return kinds


def _kind_at(spans: Sequence[tuple[str, int, int]], position: int) -> str | None:
    if position < 0:
        return None
    lo, hi = 0, len(spans)
    while lo < hi:  # spans are sorted and disjoint: binary search
        mid = (lo + hi) // 2
        if spans[mid][2] <= position:
            lo = mid + 1
        else:
            hi = mid
    return spans[lo][0] if lo < len(spans) and spans[lo][1] <= position else None


def call_indices(
    kinds: Sequence[str],
    offsets: Sequence[tuple[int, int]],
    spans: Sequence[tuple[str, int, int]],
) -> list[int]:
    """Per token, the index (within the turn) of the tool call it belongs to, or -1.

    Call-block tokens belong to their block. Reasoning and preamble tokens belong
    to the next call of the turn (the call they lead up to), or to the previous
    one when no call follows. Summary tokens, and every token of a turn without
    calls, get -1.
    """
    call_ends = [end for kind, _, end in spans if kind == "tool_call"]
    if not call_ends:
        return [-1] * len(kinds)
    last = len(call_ends) - 1
    out, call = [], 0
    for kind, (start, _end) in zip(kinds, offsets, strict=True):
        if kind == "summary":
            out.append(-1)
            continue
        while call < last and call_ends[call] <= start:
            call += 1
        out.append(call)
    return out


@dataclass(frozen=True)
class TurnLabels:
    """Everything the rollout records about one policy turn's tokens."""

    text: str
    offsets: list[tuple[int, int]]
    spans: list[tuple[str, int, int]]
    kinds: list[str]
    call_index: list[int]


def label_turn_tokens(
    decode: Callable[[Sequence[int]], str],
    ids: Sequence[int],
    *,
    final: bool | None = None,
    prefix: Sequence[int] = (),
) -> TurnLabels:
    """Label the sampled token ids of one turn by segment kind and by call.

    ``final=None`` decides from the text: a turn without a ``<tool_call>`` block
    ends the conversation (the rollout loop's rule).
    """
    text, offsets = token_offsets(decode, ids, prefix=prefix)
    if final is None:
        final = not any(region.kind == "tool_call" for region in lex_turn(text))
    spans = label_turn(text, final=final)
    empty_kind = "summary" if final else "preamble"
    kinds = label_tokens(offsets, spans, empty_kind=empty_kind)
    return TurnLabels(text, offsets, spans, kinds, call_indices(kinds, offsets, spans))


def head_masks(
    kind_codes: torch.Tensor,
    routing: Mapping[str, str | None] = DEFAULT_ROUTING,
    *,
    mode: SegmentMode = "grammar",
) -> dict[str, torch.Tensor]:
    """Bool masks per head from per-token kind codes.

    Args:
        kind_codes: ``(B, T)`` integer codes from :data:`KIND_CODE`, :data:`ENV` elsewhere.
        routing: segment kind → head name, or None to train on nothing for that kind.
            ``grammar`` mode only (``mask_runs`` needs the default routing).
        mode: ``grammar`` routes each token by its kind; ``mask_runs`` ignores kinds
            and splits the policy tokens (codes other than ENV) by
            :func:`mask_run_masks`.

    Returns:
        head → ``(B, T)`` bool mask. Masks are disjoint; their union is the
        policy-token mask minus the kinds routed to None.
    """
    if mode not in SEGMENT_MODES:
        raise ValueError(f"segment mode must be one of {list(SEGMENT_MODES)}, got {mode!r}")
    if mode == "mask_runs":
        if dict(routing) != DEFAULT_ROUTING:
            raise ValueError("segment mode 'mask_runs' ignores kinds; it needs the default routing")
        return mask_run_masks(kind_codes != ENV)
    routing = validate_routing(routing)
    heads: dict[str, list[int]] = {}
    for kind, head in routing.items():
        if head is not None:
            heads.setdefault(head, []).append(KIND_CODE[kind])
    codes = kind_codes.long()
    return {
        head: torch.isin(codes, torch.tensor(members, device=codes.device))
        for head, members in heads.items()
    }


def mask_run_masks(policy_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The reference's two segments from a policy-token mask alone.

    Args:
        policy_mask: ``(B, T)`` bool (or 0/1), the tokens the policy wrote.

    Returns:
        ``{"tool": (B, T), "summary": (B, T)}`` bool: per row, the last maximal run of
        policy tokens is ``summary`` and every earlier run ``tool``; a row with one run
        has summary only, a row with none has neither. So a rollout cut off after a
        call puts that call on the summary head, and a direct answer gets no tool head.
    """
    mask = policy_mask.bool()
    starts = mask.clone()
    starts[:, 1:] &= ~mask[:, :-1]
    run = torch.cumsum(starts, dim=1)  # run number (1-based) of each token
    last = run[:, -1:] if mask.shape[1] else run
    summary = mask & (run == last)
    return {"tool": mask & ~summary, "summary": summary}


def encode_kinds(kinds: Sequence[str | None]) -> list[int]:
    """Kind names (None for environment tokens) → codes for :func:`head_masks`."""
    return [ENV if kind is None else KIND_CODE[kind] for kind in kinds]


def union_mask(masks: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The tokens of any head: the trained policy tokens. ``(B, T)`` bool."""
    if not masks:
        raise ValueError("no head masks: segments.routing routes no kind to a head")
    heads = iter(masks.values())
    union = next(heads).clone()
    for mask in heads:
        union |= mask
    return union
