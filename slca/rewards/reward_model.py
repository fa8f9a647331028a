"""The ``reward_model`` summary scorer: a local HF sequence-classification checkpoint,
loaded on first use, scoring the summary rendered with the task's request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from slca.data.record import TaskRecord
from slca.rewards.scorers import register_summary_scorer
from slca.rewards.summary import Generate, SummaryInput, SummaryScorer, clean_text
from slca.rollout.chat import task_messages

if TYPE_CHECKING:
    from slca.config.rewards import RewardModelConfig, SummaryConfig


# ======================================================================== reward model
def render_for_reward_model(tokenizer: Any, task: TaskRecord, summary: str) -> str:
    """The text a reward model scores: the task's prompt turns and the answer, with the
    tokenizer's chat template when it has one, else as ``role: text`` lines. Training a
    reward model (slca.training.summary_rm) renders its pairs with this same function."""
    messages = task_messages(task)
    messages.append({"role": "assistant", "content": summary})
    if getattr(tokenizer, "chat_template", None):
        try:
            return clean_text(tokenizer.apply_chat_template(messages, tokenize=False))
        except Exception:  # a template that rejects the roles: fall back to plain text
            pass
    return clean_text("\n".join(f"{m['role']}: {m['content']}" for m in messages))


class RewardModelScorer(SummaryScorer):
    """An HF ``AutoModelForSequenceClassification`` checkpoint scoring (prompt, answer).

    The conversation is rendered with the tokenizer's chat template when it has one,
    else as ``role: text`` lines; inputs are truncated from the left so the answer
    is always seen. Loaded on the first batch.
    """

    def __init__(self, config: RewardModelConfig):
        if not config.path:
            raise ValueError("reward_model.path is required")
        self.config = config
        self._model: Any = None
        self._tokenizer: Any = None
        self._max_length = config.max_length

    def _load(self) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.config.path)
        tokenizer.truncation_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        model = AutoModelForSequenceClassification.from_pretrained(self.config.path)
        if model.config.pad_token_id is None and tokenizer.pad_token_id is not None:
            model.config.pad_token_id = tokenizer.pad_token_id
        self._model = model.to(self.config.device).eval()
        self._tokenizer = tokenizer
        # Never feed more tokens than the model has positions for (megabyte summaries).
        limits = [self.config.max_length, getattr(tokenizer, "model_max_length", None)]
        limits.append(getattr(model.config, "max_position_embeddings", None))
        self._max_length = min(n for n in limits if isinstance(n, int) and n > 0)

    def render(self, item: SummaryInput) -> str:
        return render_for_reward_model(self._tokenizer, item.task, item.summary)

    def score_batch(self, items: Sequence[SummaryInput]) -> list[float]:
        if not items:
            return []
        if self._model is None:
            self._load()
        import torch

        scores: list[float] = []
        size = self.config.batch_size if self._tokenizer.pad_token is not None else 1
        for start in range(0, len(items), size):
            texts = [self.render(item) for item in items[start : start + size]]
            batch = self._tokenizer(
                texts,
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self._max_length,
            ).to(self.config.device)
            with torch.no_grad():
                logits = self._model(**batch).logits.float()
            if logits.shape[-1] == 1:
                values = logits[:, 0]
                if self.config.transform == "sigmoid":
                    values = torch.sigmoid(values)
            else:
                values = torch.softmax(logits, dim=-1)[:, self.config.label]
            scores.extend(values.tolist())
        return scores


@register_summary_scorer("reward_model")
def _reward_model(config: SummaryConfig, *, generate: Generate | None = None) -> SummaryScorer:
    return RewardModelScorer(config.reward_model)
