"""The trainer's side door into a vLLM worker: a worker extension, as TRL and verl use.

vLLM mixes :class:`WeightSyncExtension` into its worker class when the engine is built
with ``worker_extension_cls="slca.generation.vllm_worker.WeightSyncExtension"``, so the
trainer calls its methods by name with ``LLM.collective_rpc`` (plain arguments only:
no pickled closures, no ``VLLM_ALLOW_INSECURE_SERIALIZATION``). This module runs in
vLLM's worker process and imports only what is there.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch


class WeightSyncExtension:
    """Methods vLLM adds to its worker (``self`` is the worker)."""

    def slca_load_weights(self, path: str) -> int:
        """Load the checkpoint-format (HF names) safetensors file at ``path`` into the
        running model and redo the backend's post-load processing; returns the number
        of tensors read.

        ``Worker.reload_weights`` restores every layer to its load-time layout, feeds
        the tensors through the model's own ``load_weights`` (HF names → fused
        ``qkv_proj``/``gate_up_proj``) and re-runs ``process_weights_after_loading``:
        the CPU backend repacks its linear weights there (after loading, its
        ``Linear.weight`` is empty and the kernel holds a packed copy), CUDA keeps them.
        A tied LM head gets no tensor of its own, so vLLM skips it; it is processed
        again here, or on CPU it would keep the packed copy of the old embedding.
        """
        from safetensors import safe_open

        count = 0

        def tensors() -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal count
            with safe_open(path, framework="pt", device="cpu") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is no mapping)
                    count += 1
                    yield name, f.get_tensor(name)

        self.reload_weights(weights_iterator=tensors(), is_checkpoint_format=True)
        _reprocess_tied_modules(self.model_runner.get_model())
        return count


def _reprocess_tied_modules(model: torch.nn.Module) -> None:
    """Re-run the post-load processing of modules whose parameters all belong to an
    earlier module (tied weights: ``named_parameters`` lists them under the first
    owner only). On CUDA this is a no-op for unquantized layers."""
    first_name = {id(p): name for name, p in model.named_parameters()}
    for prefix, module in model.named_modules():
        own = list(module.named_parameters(recurse=False))
        if not own:
            continue
        tied = all(first_name.get(id(p)) != f"{prefix}.{name}" for name, p in own)
        method = getattr(module, "quant_method", None)
        if tied and method is not None and hasattr(method, "process_weights_after_loading"):
            method.process_weights_after_loading(module)
