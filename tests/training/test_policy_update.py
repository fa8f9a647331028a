"""The update phase (slca.training.policy_update) through the trainer: on-policy ratios,
a non-finite micro-batch, and micro-batching that leaves the update unchanged."""

import pytest
import torch
from trainer_world import build_world, make


@pytest.fixture(scope="module")
def world():
    return build_world()


def test_a_single_update_per_batch_is_exactly_on_policy(world, tmp_path):
    # One epoch, one minibatch: the live log-probs are the old ones (no extra pass),
    # so every ratio is exactly 1 and nothing is clipped.
    trainer, _, recorder = make(world, tmp_path, steps=1, update={"micro_batch_size": 2})
    trainer.run()
    metrics = recorder.metrics[0][1]
    assert metrics["actor/ratio_mean"] == 1.0 and metrics["actor/clipfrac"] == 0.0
    assert metrics["actor/grad_norm"] > 0


def test_a_non_finite_micro_batch_skips_its_whole_minibatch(world, tmp_path, monkeypatch):
    """The second micro-batch's loss is NaN: the first one's gradient and metrics must
    not count either; nothing is applied and the skip is counted once."""
    import slca.training.policy_update as policy_update

    trainer, model, recorder = make(
        world,
        tmp_path,
        steps=1,
        histogram_every=5,  # no gradient probe: it calls the loss too
        update={"micro_batch_size": 2, "minibatches": 1},
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    calls = []
    real = policy_update.policy_loss

    def nan_on_second(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        calls.append(1)
        return (loss * float("nan") if len(calls) == 2 else loss), metrics

    monkeypatch.setattr(policy_update, "policy_loss", nan_on_second)
    trainer.run()
    assert len(calls) == 2  # both micro-batches ran (ranks stay in lockstep)
    metrics = recorder.metrics[0][1]
    assert metrics["actor/skipped_steps"] == 1.0 and trainer.state.skipped_steps == 1
    assert not any(k in metrics for k in ("actor/pg_loss", "actor/entropy", "actor/grad_norm"))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert trainer.update.steps == 0 and trainer.update.optimizer.state_dict()["state"] == {}
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_micro_batching_does_not_change_the_update(world, tmp_path, aggregation):
    """One micro-batch of 4 rollouts or four of 1: the same objective, so the same step
    (each micro-batch weighs by its share of the minibatch's tokens, or sequences)."""
    runs = []
    for size in (4, 1):
        trainer, model, recorder = make(
            world,
            tmp_path / str(size),
            steps=1,
            update={"micro_batch_size": size, "minibatches": 1},
            algorithm={"loss": {"aggregation": aggregation, "kl_coef": 0.0}},
            # SGD, whose step is lr * g: AdamW's first step is ~lr * sign(g), which hides a
            # misweighted micro-batch and turns summation-order noise in a g near its eps
            # into a sizeable fraction of lr
            optim={"name": "sgd", "weight_decay": 0.0},
        )
        before = {k: v.clone() for k, v in model.state_dict().items()}
        trainer.run()
        after = model.state_dict()
        assert any(not torch.equal(after[k], before[k]) for k in after)  # the step moved
        runs.append((after, recorder.metrics[0][1]))
    (a, metrics_a), (b, metrics_b) = runs
    assert metrics_a["actor/grad_norm"] == pytest.approx(metrics_b["actor/grad_norm"], rel=1e-4)
    assert metrics_a["actor/pg_loss"] == pytest.approx(metrics_b["actor/pg_loss"], abs=1e-6)
    # a few float32 ulps of the weight (summation order can round w - lr*g to the next
    # float); the steps themselves are 1e-7 to 1e-4, so a misweighted micro-batch fails
    for key in a:
        torch.testing.assert_close(
            a[key], b[key], rtol=4 * torch.finfo(torch.float32).eps, atol=1e-8
        )


# ---------------------------------------------------------------- issue 18: the factory


# ---------------------------------------------------------------- issue 35: precision


def test_bf16_forwards_run_in_autocast_and_every_backward_outside_it(world, tmp_path, monkeypatch):
    """With ``train.engine.bf16`` on the CPU the update's forwards run in bf16 autocast,
    while the engine's backward and the gradient probe's ``autograd.grad`` run after
    autocast is left (PyTorch advises against backward under autocast)."""
    from slca.config.engine import EngineConfig
    from slca.training.engines import TorchEngine

    trainer, model, _ = make(world, tmp_path, steps=1, update={"micro_batch_size": 2})
    trainer.update = TorchEngine(model, EngineConfig(bf16=True, optim={"lr": 1e-3}))
    logits = set()
    model.lm_head.register_forward_hook(lambda _m, _i, out: logits.add(out.dtype))
    inside = []  # autocast state at each backward
    real_backward, real_grad = trainer.update.backward, torch.autograd.grad

    def backward(loss, *, boundary=True):
        inside.append(("backward", torch.is_autocast_enabled("cpu")))
        real_backward(loss, boundary=boundary)

    def grad(*args, **kwargs):
        inside.append(("grad", torch.is_autocast_enabled("cpu")))
        return real_grad(*args, **kwargs)

    monkeypatch.setattr(trainer.update, "backward", backward)
    monkeypatch.setattr(torch.autograd, "grad", grad)
    trainer.run()
    assert logits == {torch.bfloat16}
    assert {kind for kind, _ in inside} == {"backward", "grad"}  # the probe ran too
    assert not any(state for _, state in inside)
