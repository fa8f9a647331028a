"""The sft flow's section: the SFT run goes where the RL runs and evaluations go."""

from slca_pipeline.flows.sft import sft_section


def test_the_sft_run_takes_the_train_sections_store_and_experiment_unless_set():
    document = {"sft": {"epochs": 2}, "train": {"tracking_dir": "/s/mlflow", "experiment": "e"}}
    taken = sft_section(document, "params.yaml")
    assert (taken.tracking_dir, taken.experiment, taken.epochs) == ("/s/mlflow", "e", 2)
    document["sft"] |= {"tracking_dir": None, "experiment": "own"}
    kept = sft_section(document, "params.yaml")
    assert (kept.tracking_dir, kept.experiment) == (None, "own")
    assert sft_section({"sft": {}}, "params.yaml").tracking_dir == "mlflow"  # the default
