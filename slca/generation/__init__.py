"""Generation engines: token-id prompts in, sampled tokens with log-probabilities out
(transformers and vLLM, CPU or GPU), and the device they run on. The simulator,
rollouts, evaluation and training import from here; nothing here imports them."""
