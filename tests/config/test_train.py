import pytest

from slca.config import ConfigError, load_section
from slca.config.algorithm import AlgorithmConfig


def write(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_defaults_are_the_paper_setting():
    cfg = AlgorithmConfig()
    assert cfg.advantage.estimator == "slca"
    assert cfg.advantage.granularity == "trajectory"
    assert cfg.segments.heads == {"tool", "summary"}
    assert cfg.loss.aggregation == "token-mean"


def test_a_missing_section_gives_defaults_and_a_nested_one_loads(tmp_path):
    path = write(tmp_path, "train:\n  algorithm:\n    advantage:\n      estimator: grpo\n")
    assert load_section(path, "train.algorithm", AlgorithmConfig).advantage.estimator == "grpo"
    assert load_section(path, "other", AlgorithmConfig) == AlgorithmConfig()


@pytest.mark.parametrize(
    "body, message",
    [
        ("advantage:\n  estimator: ppo", r"train.advantage.estimator: .*unknown estimator 'ppo'"),
        ("advantage:\n  estimator: grpo\n  granularity: per_call", "needs estimator 'slca'"),
        ("advantage:\n  weights: {tool: -1}", "weights must be >= 0"),
        ("advantage:\n  weights: {critic: 1}", r"names head\(s\) \['critic'\]"),
        ("loss:\n  clip_low: 1.5", r"train.loss.clip_low: Input should be less than 1"),
        ("loss:\n  agregation: token-mean", r"train.loss.agregation: Extra inputs"),
        (
            "segments:\n  routing: {reasoning: tool, tool_call: tool, preamble: tool}",
            r"missing: \['summary'\]",
        ),
        (
            "advantage:\n  estimator: rltr\n  weights: {a: 1}\n"
            "segments:\n  routing: {reasoning: a, tool_call: a, preamble: a, summary: b}\n",
            "needs segments.routing to route some kind to the 'tool'",
        ),
    ],
)
def test_errors_name_the_file_key_and_constraint(tmp_path, body, message):
    indented = "\n".join("  " + line for line in body.splitlines())
    path = write(tmp_path, "train:\n" + indented + "\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_section(path, "train", AlgorithmConfig)
    assert str(path) in str(info.value)


def test_unreadable_yaml_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read YAML"):
        load_section(write(tmp_path, "train: [unclosed"), "train", AlgorithmConfig)
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_section(write(tmp_path, "train: 3"), "train.algorithm", AlgorithmConfig)


def test_dotted_overrides_apply_before_validation_and_are_named_in_errors(tmp_path):
    from slca.config import parse_override

    path = write(tmp_path, "train:\n  algorithm:\n    advantage:\n      estimator: slca\n")
    key, value = parse_override("train.algorithm.advantage.estimator=grpo")
    cfg = load_section(path, "train.algorithm", AlgorithmConfig, {key: value})
    assert cfg.advantage.estimator == "grpo"
    assert parse_override("train.steps=4") == ("train.steps", 4)
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_override("train.steps")
    with pytest.raises(ConfigError, match=r"train.algorithm.loss.clip_low: Input should be"):
        load_section(path, "train.algorithm", AlgorithmConfig, {"train.algorithm.loss.clip_low": 2})


def test_stage_clis_read_repeated_set_options_as_yaml_values():
    import argparse

    from slca.config import add_override_option, overrides_of

    parser = argparse.ArgumentParser()
    add_override_option(parser, "train.steps=4")
    args = parser.parse_args(["-S", "train.steps=4", "--set", "train.run_name=a b", "-S", "x=[1]"])
    assert overrides_of(args) == {"train.steps": 4, "train.run_name": "a b", "x": [1]}
    assert overrides_of(parser.parse_args([])) == {}
    with pytest.raises(ConfigError, match="expected key=value"):
        overrides_of(parser.parse_args(["-S", "train.steps"]))


def test_estimator_shorthand_sets_the_advantage_estimator_and_must_agree():
    from slca.config.train import TrainConfig

    assert TrainConfig().estimator == TrainConfig().algorithm.advantage.estimator == "slca"
    short = TrainConfig(estimator="grpo")
    assert short.algorithm.advantage.estimator == "grpo"
    assert TrainConfig(**short.model_dump()).estimator == "grpo"  # round trip
    nested = TrainConfig(algorithm={"advantage": {"estimator": "toolpo"}})
    assert nested.estimator == "toolpo"
    with pytest.raises(ValueError, match="give one of them"):
        TrainConfig(estimator="grpo", algorithm={"advantage": {"estimator": "slca"}})
    with pytest.raises(ValueError, match="unknown estimator 'nope'"):
        TrainConfig(estimator="nope")
    with pytest.raises(ValueError, match="baseline"):
        TrainConfig(baseline="nope")


# ---------------------------------------------------------------- profiles


def test_reference_profile_fills_in_every_setting_it_implies(tmp_path):
    from slca.config.train import TrainConfig

    path = write(tmp_path, "train:\n  algorithm:\n    profile: reference\n")
    cfg = load_section(path, "train", TrainConfig)
    algorithm = cfg.algorithm
    assert algorithm.segments.mode == "mask_runs"
    assert algorithm.advantage.switches() == {
        "numerics": "float32",
        "singleton": "raw",
        "weight_penalty": False,
    }
    assert algorithm.loss.clip_ratio_c == 3.0
    assert cfg.rewards.mode == "reference" and cfg.rewards.guard.enabled
    # What the profile leaves alone keeps slca's defaults or the user's value.
    assert algorithm.advantage.estimator == "slca" and algorithm.advantage.eps == 1e-6
    grpo = TrainConfig(
        estimator="grpo", algorithm={"profile": "reference", "loss": {"clip_ratio_c": 5}}
    )
    assert grpo.algorithm.advantage.estimator == "grpo" and grpo.algorithm.loss.clip_ratio_c == 5
    assert TrainConfig(**cfg.model_dump()) == cfg  # a dumped config reloads (flows do this)


def test_default_profile_is_slcas_design_unchanged():
    from slca.config.train import TrainConfig

    cfg = TrainConfig()
    assert cfg.algorithm.profile == "default"
    assert cfg.algorithm.segments.mode == "grammar"
    assert cfg.algorithm.advantage.switches() == {
        "numerics": "float64",
        "singleton": "zero",
        "weight_penalty": True,
    }
    assert cfg.algorithm.loss.clip_ratio_c is None and cfg.rewards.mode == "process"


def test_each_reference_setting_is_usable_on_its_own():
    from slca.config.train import TrainConfig

    for algorithm in (
        {"segments": {"mode": "mask_runs"}},
        {"advantage": {"numerics": "float32"}},
        {"advantage": {"estimator": "grpo", "singleton": "raw"}},
        {"advantage": {"weight_penalty": False}},
        {"loss": {"clip_ratio_c": 3.0}},
    ):
        cfg = TrainConfig(algorithm=algorithm)
        assert cfg.algorithm.profile == "default" and cfg.rewards.mode == "process"
    assert TrainConfig(rewards={"mode": "reference"}).algorithm.segments.mode == "grammar"


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "algorithm:\n  profile: paper",
            r"train.algorithm.profile: Input should be 'default' or 'reference'",
        ),
        (
            "algorithm:\n  profile: reference\n  advantage:\n    numerics: float64",
            r"algorithm.advantage.numerics: 'float64' contradicts profile 'reference' "
            r"\(allowed: 'float32'\)",
        ),
        (
            "algorithm:\n  profile: reference\n  segments:\n    mode: grammar",
            r"algorithm.segments.mode: 'grammar' contradicts .* \(allowed: 'mask_runs'\)",
        ),
        (
            "algorithm:\n  profile: reference\n  advantage:\n    singleton: zero",
            r"algorithm.advantage.singleton: 'zero' contradicts .* \(allowed: 'raw'\)",
        ),
        (
            "algorithm:\n  profile: reference\n  advantage:\n    weight_penalty: true",
            r"algorithm.advantage.weight_penalty: True contradicts .* \(allowed: False\)",
        ),
        (
            "algorithm:\n  profile: reference\n  advantage:\n    granularity: per_call",
            r"algorithm.advantage.granularity: 'per_call' contradicts .* "
            r"\(allowed: 'trajectory'\)",
        ),
        (
            "algorithm:\n  profile: reference\n  loss:\n    clip_ratio_c: null",
            r"algorithm.loss.clip_ratio_c: null contradicts .* \(allowed: any value but null\)",
        ),
        (
            "algorithm:\n  profile: reference\n  advantage:\n    estimator: rltr",
            r"algorithm.advantage.estimator: 'rltr' contradicts profile 'reference' "
            r"\(allowed: 'grpo', 'dr_grpo', 'slca'\)",
        ),
        (
            "algorithm:\n  profile: reference\nrewards:\n  mode: process",
            r"rewards.mode: 'process' contradicts profile 'reference' \(allowed: 'reference'\)",
        ),
        (
            "algorithm:\n  profile: reference\nrewards:\n  guard:\n    enabled: false",
            r"rewards.guard.enabled: False contradicts .* \(allowed: True\)",
        ),
        (
            "algorithm:\n  segments:\n    mode: mask_runs\n    routing: "
            "{reasoning: null, tool_call: tool, preamble: tool, summary: summary}",
            "routing applies to mode 'grammar' only",
        ),
        (
            "algorithm:\n  loss:\n    clip_ratio_c: 0.5",
            r"clip_ratio_c: Input should be greater than 1",
        ),
        (
            "rewards:\n  mode: reference\nalgorithm:\n  advantage:\n    granularity: per_call",
            "needs per-call rewards, which rewards.mode 'reference' does not define",
        ),
    ],
)
def test_a_profile_and_a_setting_it_contradicts_are_refused_at_load(tmp_path, body, message):
    from slca.config.train import TrainConfig

    indented = "\n".join("  " + line for line in body.splitlines())
    path = write(tmp_path, "train:\n" + indented + "\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_section(path, "train", TrainConfig)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "body, message",
    [
        ("steps: 0", r"train.steps: Input should be greater than or equal to 1"),
        ("rollout:\n  tasks_per_step: 0", r"train.rollout.tasks_per_step: Input should be"),
        (
            "rollout:\n  max_total_tokens: 96\n  max_new_tokens: 96",
            r"train.rollout: .*max_total_tokens \(96\) must exceed max_new_tokens \(96\)",
        ),
        (
            "algorithm:\n  loss:\n    norm_length: 0",
            r"train.algorithm.loss.norm_length: Input should be greater than or equal to 1",
        ),
        ("rewards:\n  truncation:\n    penalty: -1", r"train.rewards.truncation.penalty"),
    ],
)
def test_a_run_that_cannot_happen_is_refused_at_load_naming_the_key(tmp_path, body, message):
    from slca.config.train import TrainConfig

    indented = "\n".join("  " + line for line in body.splitlines())
    path = write(tmp_path, "train:\n" + indented + "\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_section(path, "train", TrainConfig)
    assert str(path) in str(info.value)


def test_an_evaluation_without_room_for_a_prompt_is_refused_naming_the_keys(tmp_path):
    from slca.config.evaluate import EvaluateParams

    path = write(tmp_path, "evaluate:\n  max_total_tokens: 64\n  max_new_tokens: 96\n")
    with pytest.raises(ConfigError, match=r"evaluate: .*max_total_tokens \(64\) must exceed"):
        load_section(path, "evaluate", EvaluateParams)


def test_the_length_unbiased_loss_divides_by_the_rollout_budget_unless_told():
    from slca.config.train import TrainConfig

    config = TrainConfig.model_validate({"rollout": {"max_new_tokens": 50, "max_turns": 3}})
    assert config.loss_norm_length == 150.0
    told = TrainConfig.model_validate({"algorithm": {"loss": {"norm_length": 64}}})
    assert told.loss_norm_length == 64.0
