"""The hardware catalogue: models by Hugging Face id or config.json, GPUs by name, calibrations."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import yaml

from kvsched.errors import KvschedError
from kvsched.timing import hardware
from kvsched.timing.hardware import (
    known_gpus,
    known_models,
    load_calibration,
    load_gpu,
    load_model,
)

REQUIRED_MODELS = ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-70b-hf",
                   "meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-3.1-8B",
                   "meta-llama/Llama-3.1-70B", "mistralai/Mistral-7B-v0.1", "Qwen/Qwen2.5-7B",
                   "Qwen/Qwen2.5-72B")
REQUIRED_GPUS = ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "l40s", "a40")


def test_every_required_entry_is_there_and_cites_its_source():
    for name in REQUIRED_MODELS:
        model = load_model(name)
        assert "huggingface.co/" + name in model.source
        assert model.heads * model.head_dim == model.hidden
    for name in REQUIRED_GPUS:
        gpu = load_gpu(name)
        assert gpu.source.startswith("https://")
        assert gpu.peak_flops > 1e14 and gpu.memory_bw > 5e11 and gpu.memory >= 40e9
        load_calibration(gpu)  # every GPU has a calibration (fitted or transferred)


def test_catalogue_numbers_match_the_configs_and_datasheets():
    llama70 = load_model("meta-llama/Llama-3.1-70B")
    assert (llama70.layers, llama70.hidden, llama70.intermediate, llama70.kv_heads,
            llama70.vocab) == (80, 8192, 28672, 8, 128256)
    qwen = load_model("Qwen/Qwen2.5-7B")
    assert (qwen.layers, qwen.hidden, qwen.heads, qwen.kv_heads) == (28, 3584, 28, 4)
    assert 6.6e9 < load_model("meta-llama/Llama-2-7b-hf").params < 6.8e9  # "7B": 6.74e9
    assert 69e9 < llama70.params < 71.5e9
    h100 = load_gpu("h100-sxm")
    assert h100.peak_flops == 989e12 and h100.memory_bw == 3.35e12  # dense bf16, HBM3
    assert load_gpu("a100-40gb").memory_bw < load_gpu("a100-80gb").memory_bw
    assert load_gpu("h200").memory == 141e9


def test_names_match_case_insensitively():
    assert load_gpu("H100-SXM").name == "h100-sxm"
    assert load_model("META-LLAMA/llama-3.1-8b").name == "meta-llama/Llama-3.1-8B"


def test_an_unknown_name_is_one_line_listing_the_known_ones():
    with pytest.raises(ValueError) as info:
        load_gpu("b200")
    message = str(info.value)
    assert "\n" not in message and "b200" in message
    assert all(name in message for name in known_gpus())
    with pytest.raises(KvschedError, match="Qwen/Qwen2.5-72B"):
        load_model("gpt-5")
    assert len(known_models()) >= 8


def test_a_local_config_json_is_read_with_hf_keys(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "num_hidden_layers": 24, "hidden_size": 2048, "intermediate_size": 5632,
        "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 50000,
        "tie_word_embeddings": True}))
    model = load_model(str(path))
    assert (model.layers, model.kv_heads, model.head_dim, model.tied) == (24, 4, 128, True)
    assert model.params == 24 * model.layer_params + 50000 * 2048
    assert load_model(tmp_path) == model  # the folder of a downloaded model


def test_a_config_without_the_shape_keys_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 10}))
    with pytest.raises(ValueError, match="num_hidden_layers"):
        load_model(path)


def test_unmeasured_gpus_take_a_transferred_calibration():
    assert "transferred" in load_calibration("l40s").source
    assert "transferred" not in load_calibration("h100-sxm").source


@pytest.mark.parametrize("name", ["models.yaml", "gpus.yaml", "calibration.yaml"])
def test_the_catalogue_reads_as_pyyamls_own_parser_reads_it(name):
    """The shipped files give the same data through the fast loader as through PyYAML's."""
    text = (resources.files("kvsched.timing.hardware") / name).read_text(encoding="utf-8")
    data = hardware._read(name)
    assert data and data == yaml.load(text, Loader=yaml.SafeLoader)
    assert repr(data) == repr(yaml.load(text, Loader=yaml.SafeLoader))  # (floats, bit for bit)
