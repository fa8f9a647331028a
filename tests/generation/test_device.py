"""Device resolution (:mod:`slca.generation.device`)."""

import pytest
import torch

from slca.generation.device import resolve_device


def test_null_is_the_gpu_when_there_is_one_else_the_cpu():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device(None).type == expected
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_an_error_naming_the_setting():
    with pytest.raises(ValueError, match=r"evaluate.device='cuda' but .* no CUDA device"):
        resolve_device("cuda", key="evaluate.device")
