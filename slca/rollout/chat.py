"""Prompts through the tokenizer's chat template, with tools (DESIGN §3).

Real models (Qwen2.5/3, Llama 3.x) render ``tools=`` with their own templates. A
model whose template ignores ``tools=`` (SmolLM2-135M-Instruct does) gets
:data:`HERMES_TEMPLATE`: ChatML turns, the tool signatures in the system turn,
calls as ``<tool_call>`` JSON and responses as ``<tool_response>`` blocks in a user
turn — the format Qwen2.5 was trained on and :mod:`slca.grammar` parses.

Environment tokens (tool responses and template text between policy turns) are the
difference between two renderings of the conversation, so the policy's own tokens
are never re-tokenised.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from slca.grammar import ToolCall, render_tool_call

END_OF_TURN = "<|im_end|>"
"""ChatML's end of a turn: the Hermes template's, and the tiny tokenizer's eos."""

HERMES_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>'
    "<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML with Hermes-style tool calling (system turn lists the tools)."""

_PROBE_TOOL = {
    "type": "function",
    "function": {"name": "probe_tool", "description": "probe", "parameters": {"type": "object"}},
}


def openai_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Task tool specs (flat, with ``response``) as OpenAI ``{"type": "function", …}`` objects."""
    out = []
    for tool in tools:
        function = tool.get("function", tool)
        out.append(
            {
                "type": "function",
                "function": {
                    "name": function["name"],
                    "description": function.get("description", ""),
                    "parameters": function.get("parameters", {"type": "object"}),
                },
            }
        )
    return out


def ensure_tool_template(tokenizer: Any) -> bool:
    """Give ``tokenizer`` the Hermes template if its own ignores ``tools=``.

    Returns True when the template was replaced.
    """
    messages = [{"role": "user", "content": "hi"}]
    template = getattr(tokenizer, "chat_template", None)
    if template:
        with_tools = tokenizer.apply_chat_template(messages, tools=[_PROBE_TOOL], tokenize=False)
        if "probe_tool" in with_tools:
            return False
    tokenizer.chat_template = HERMES_TEMPLATE
    return True


_PROBE_RESPONSE = "probe-response-5c1e"
_PROBE_ANSWER = "probe answer"

_turn_ends: weakref.WeakKeyDictionary[Any, tuple[str, str | None]] = weakref.WeakKeyDictionary()


def turn_end(tokenizer: Any) -> str | None:
    """The special token ``tokenizer``'s chat template writes right after an assistant
    turn's text: ChatML's ``<|im_end|>``, Llama 3's ``<|eot_id|>``, Gemma's
    ``<end_of_turn>``. The policy samples it to end a turn (a stop token, and the last
    token SFT teaches). None when the template writes no special token there or there
    is no template. Cached per tokenizer and template: renderers are made per rollout."""
    template = getattr(tokenizer, "chat_template", None)
    cached = _turn_ends.get(tokenizer)
    if cached is not None and cached[0] == template:
        return cached[1]
    found = None
    if template:
        messages = [{"role": "user", "content": "hi"}]
        messages.append({"role": "assistant", "content": _PROBE_ANSWER})
        try:  # with tools, as the loop renders
            text = tokenizer.apply_chat_template(messages, tools=[_PROBE_TOOL], tokenize=False)
        except Exception:  # noqa: BLE001 (templates raise anything; template_problems says why)
            text = ""
        at = text.find(_PROBE_ANSWER)
        tail = text[at + len(_PROBE_ANSWER) :] if at >= 0 else ""
        special = {str(t) for t in getattr(tokenizer, "all_special_tokens", ())}
        added = getattr(tokenizer, "added_tokens_decoder", {}).values()
        special |= {t.content for t in added if t.special}
        places = [(tail.find(t), -len(t), t) for t in special if t and t in tail]
        found = min(places)[2] if places else None
    _turn_ends[tokenizer] = (template, found)
    return found


def turn_stop_ids(tokenizer: Any) -> list[int]:
    """What ends a policy's generation: the template's :func:`turn_end` and eos."""
    end = turn_end(tokenizer)
    ids = {tokenizer.eos_token_id}
    if end is not None:
        ids.add(tokenizer.convert_tokens_to_ids(end))
    return sorted(int(i) for i in ids if i is not None)


def template_problems(tokenizer: Any) -> list[str]:
    """What stops ``tokenizer``'s own chat template from serving the tool loop; empty
    when it passes. The loop needs it to render ``tools=`` (the policy must see the
    schemas), a tool turn after an assistant turn (with the tool's content in the
    text), the conversation as a growing prefix (:meth:`ChatRenderer.environment_ids`
    appends to the previous rendering) and a special token after an assistant turn
    (:func:`turn_end`, the stop token the policy samples)."""
    if not getattr(tokenizer, "chat_template", None):
        return ["is missing"]
    tools = [_PROBE_TOOL]
    user = {"role": "user", "content": "hi"}
    assistant = {"role": "assistant", "content": _PROBE_ANSWER}
    tool = {"role": "tool", "name": "probe_tool", "content": _PROBE_RESPONSE}

    def render(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    try:
        prompt = render([user], True)
        before = render([user, assistant], False)
        after = render([user, assistant, tool], True)
    except Exception as exc:  # noqa: BLE001 (templates raise anything: TemplateError, ValueError)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [f"fails on a tool turn after an assistant turn ({first})"]
    problems = []
    if "probe_tool" not in prompt:
        problems.append("ignores tools= (the tool schemas never reach the prompt)")
    if _PROBE_RESPONSE not in after:
        problems.append("drops tool turns (a tool message's content is not rendered)")
    if not after.startswith(before):
        problems.append("does not render the conversation as a growing prefix")
    answer = before.find(_PROBE_ANSWER)
    if answer < 0:
        problems.append("drops assistant turns")
    elif turn_end(tokenizer) is None:
        problems.append("ends an assistant turn with no special token (a stop token)")
    return problems


def choose_template(tokenizer: Any, choice: str, checkpoint: str) -> str | None:
    """Give ``tokenizer`` the chat template ``choice`` (``base_model.chat_template``)
    asks for: the checkpoint's own if it passes :func:`template_problems`, else Hermes
    (``auto``); its own or an error (``own``); always Hermes (``hermes``). ``checkpoint``
    names it in messages. Returns the one line
    to log when ``auto`` replaced a failing template, else None; raises
    :class:`~slca.config.ConfigError` (one line) when ``own`` fails the check, or when
    the vocabulary cannot end a Hermes turn."""
    from slca.config import ConfigError

    problems = [] if choice == "hermes" else template_problems(tokenizer)
    if not problems and choice != "hermes":
        return None
    if choice == "own":
        raise ConfigError(
            f"base_model.chat_template 'own': the chat template of {checkpoint} cannot "
            f"serve the tool loop: {'; '.join(problems)}; set -S "
            "base_model.chat_template=hermes (or auto) to use the Hermes template"
        )
    end_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if end_id is None or end_id == getattr(tokenizer, "unk_token_id", None):
        why = f"its own fails ({'; '.join(problems)})" if problems else "chat_template is hermes"
        raise ConfigError(
            f"base_model.chat_template: {checkpoint} needs the Hermes template ({why}), but "
            f"its vocabulary has no {END_OF_TURN!r} token to end a Hermes turn: use a "
            "checkpoint whose own template passes, or a ChatML one (Qwen2.5, Qwen3, "
            f"SmolLM2), or add {END_OF_TURN!r} to its tokenizer as a special token and "
            "resize its embeddings"
        )
    tokenizer.chat_template = HERMES_TEMPLATE
    if choice == "hermes":
        return None
    return (
        f"base_model.chat_template auto: the chat template of {checkpoint} "
        f"{'; '.join(problems)}; using the Hermes template instead"
    )


class ChatRenderer:
    """Renders one task's conversation to token ids, turn by turn.

    ``tools`` are the task's tool specs; ``end_of_turn`` is the text of the token
    that ends an assistant turn (the stop token the policy samples), by default the
    template's own (:func:`turn_end`).
    """

    def __init__(
        self,
        tokenizer: Any,
        tools: Sequence[Mapping[str, Any]],
        end_of_turn: str | None = None,
    ):
        self.tokenizer = tokenizer
        self.tools = openai_tools(tools) or None
        end_of_turn = end_of_turn or turn_end(tokenizer)
        if end_of_turn is None:
            raise ValueError(
                "the chat template writes no special token after an assistant turn: "
                "nothing to end a policy turn with (base_model.chat_template: hermes)"
            )
        self.end_of_turn = end_of_turn

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=self.tools,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        return self.encode(self.render(messages, add_generation_prompt=True))

    def environment_ids(
        self,
        history: Sequence[Mapping[str, Any]],
        assistant_text: str,
        tool_messages: Sequence[Mapping[str, Any]],
    ) -> list[int]:
        """Tokens between an assistant turn's end token and the next generation prompt.

        ``history`` is the conversation before the assistant turn; the turn's own
        tokens (ending with the end-of-turn token) are already in the trajectory.
        """
        assistant = {"role": "assistant", "content": assistant_text}
        before = self.render([*history, assistant], add_generation_prompt=False)
        after = self.render([*history, assistant, *tool_messages], add_generation_prompt=True)
        if not after.startswith(before):
            raise ValueError(
                "the chat template does not render the conversation as a "
                "growing prefix; cannot append tool responses"
            )
        end = before.rfind(self.end_of_turn)
        if end < 0:
            raise ValueError(
                f"the chat template never writes {self.end_of_turn!r} after an assistant turn"
            )
        return self.encode(before[end + len(self.end_of_turn) :] + after[len(before) :])


def tool_message(name: str, response: Any) -> dict[str, Any]:
    """The chat message that carries one simulator response back to the policy."""
    content = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
    return {"role": "tool", "name": name, "content": content}


def task_messages(task: Any) -> list[dict[str, Any]]:
    """A task's prompt turns as chat-template messages.

    Context assistant turns become the text a policy turn would be (its words, then one
    ``<tool_call>`` block per call), so the model sees earlier calls exactly as it
    writes its own; tool turns go to the template as tool messages.
    """
    out: list[dict[str, Any]] = []
    for m in task.messages:
        if m.role == "assistant":
            blocks = [render_tool_call(ToolCall(c.name, c.arguments)) for c in m.tool_calls or []]
            text = "\n".join(part for part in (m.content.strip(), *blocks) if part)
            out.append({"role": "assistant", "content": text})
        elif m.role == "tool":
            out.append({"role": "tool", "name": m.name or "", "content": m.content})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def fitting_tasks(tasks: list[Any], tokenizer: Any, max_prompt_tokens: int) -> list[Any]:
    """The tasks whose rendered prompt leaves room for a turn (some real tools' schemas
    alone run to tens of thousands of tokens); an error when none does."""
    kept = []
    for task in tasks:
        renderer = ChatRenderer(tokenizer, [t.model_dump() for t in task.tools])
        prompt = renderer.prompt_ids(task_messages(task))
        if len(prompt) <= max_prompt_tokens:
            kept.append(task)
    if not kept:
        raise ValueError(
            f"train: no task's prompt fits rollout.max_total_tokens - "
            f"rollout.max_new_tokens = {max_prompt_tokens} tokens"
        )
    return kept
