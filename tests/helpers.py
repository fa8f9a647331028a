"""Shared test doubles (importable as ``helpers`` via pytest's ``pythonpath``)."""

from slca.rollout.engines import Generation

DESIGN_METRICS = (
    "reward/tool",
    "reward/sum",
    "reward/total",
    "adv/tool_mean",
    "adv/tool_std",
    "adv/sum_mean",
    "adv/sum_std",
    "adv/zero_group_frac",
    "actor/pg_loss",
    "actor/kl",
    "actor/clipfrac",
    "actor/entropy",
    "actor/grad_norm",
    "rollout/tool_calls_per_task",
    "rollout/redundant_calls",
    "sim/invalid_rate",
    "perf/tokens_per_s",
    "perf/step_s",
)
"""The per-step metrics DESIGN §8 names."""


class ScriptedEngine:
    """A policy that answers turn n of the rollout at position p of a generation call
    with ``script[n]`` — or, when ``script[n]`` is a list, ``script[n][p % len]`` —
    followed by the end-of-turn token. Lets tests choose exactly what the policy says."""

    name = "scripted"

    def __init__(self, tokenizer, script, stop=True):
        self.tokenizer, self.script, self.stop = tokenizer, script, stop
        self.prompts = []

    def generate(self, prompts, params):
        self.prompts.extend(prompts)
        start = self.tokenizer.convert_tokens_to_ids("<|im_start|>")
        out = []
        for position, prompt in enumerate(prompts):
            turn = self.tokenizer.decode(prompt).count("<|im_start|>assistant") - 1
            text = self.script[min(turn, len(self.script) - 1)]
            if isinstance(text, list):
                text = text[position % len(text)]
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: params.max_new_tokens]
            if self.stop and len(ids) < params.max_new_tokens:
                ids.append(self.tokenizer.eos_token_id)
            assert start not in ids
            stopped = ids[-1:] == [self.tokenizer.eos_token_id]
            out.append(Generation(ids, [-0.5] * len(ids), stopped=stopped))
        return out

    def load_weights(self, state_dict):
        self.loaded = state_dict
