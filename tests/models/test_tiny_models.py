"""Tiny Qwen2.5-VL / Qwen3-VL: forward with a screenshot, generate, hidden states, save/load."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from PIL import Image, ImageDraw

from webrl.models import TinyModelConfig, load_model, tiny_model

FAMILIES = ["qwen2.5-vl", "qwen3-vl"]


def screenshot(width=320, height=200) -> Image.Image:
    """A page-like picture: header bar, a search box, two buttons with labels."""
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    d.rectangle([0, 0, width, 30], fill=(30, 60, 120))
    d.rectangle([20, 50, 220, 75], outline="black")
    d.text((25, 55), "Search", fill="gray")
    d.rectangle([230, 50, 300, 75], fill=(0, 120, 0))
    d.text((240, 55), "Go", fill="white")
    d.rectangle([20, 100, 120, 130], fill=(200, 50, 50))
    return img


def inputs(processor, text="Click the Go button", image=None):
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    prompt = processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return processor(text=[prompt], images=[image or screenshot()], return_tensors="pt")


@pytest.fixture(params=FAMILIES)
def family_path(request, tiny_model_paths):
    return request.param, tiny_model_paths[request.param]


def test_forward_with_screenshot_and_hidden_states(family_path):
    family, path = family_path
    model, processor = load_model(path)
    batch = inputs(processor)
    factor = TinyModelConfig(family=family).factor
    # 320x200 under the 64-token budget (max_pixels = 64 * factor^2):
    # qwen2.5-vl, factor 28: rounding gives 196 x 308 = 60368 px > 50176, so scale by
    #   beta = sqrt(64000 / 50176) = 1.129: H = floor(177.1 / 28) * 28 = 168, W = floor(283.3 / 28) * 28 = 280
    # qwen3-vl, factor 32: rounding gives 192 x 320 = 61440 px <= 65536, kept.
    expected_hw = {28: (168, 280), 32: (192, 320)}[factor]
    grid = batch["image_grid_thw"][0].tolist()
    assert grid == [1, expected_hw[0] * 2 // factor, expected_hw[1] * 2 // factor]  # [1, 12, 20] both
    n_image_tokens = grid[1] * grid[2] // 4  # 2x2 patches merge into one token
    assert int((batch["input_ids"] == processor.image_token_id).sum()) == n_image_tokens
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    T = batch["input_ids"].shape[1]
    assert out.logits.shape == (1, T, model.config.text_config.vocab_size)
    assert len(out.hidden_states) == model.config.text_config.num_hidden_layers + 1
    assert all(h.shape == (1, T, 128) for h in out.hidden_states)
    assert torch.isfinite(out.logits).all()
    # The image matters: a different screenshot changes the logits at the last position.
    other = inputs(processor, image=Image.new("RGB", (320, 200), "black"))
    with torch.no_grad():
        other_logits = model(**other).logits
    assert not torch.allclose(out.logits[0, -1], other_logits[0, -1])


def test_generate(family_path):
    _, path = family_path
    model, processor = load_model(path)
    batch = inputs(processor)
    out = model.generate(**batch, max_new_tokens=8, do_sample=False)
    new = out[0, batch["input_ids"].shape[1]:]
    assert 1 <= len(new) <= 8
    assert out[0, : batch["input_ids"].shape[1]].tolist() == batch["input_ids"][0].tolist()
    # greedy = argmax of the forward pass at the last prompt position
    with torch.no_grad():
        first = model(**batch).logits[0, -1].argmax().item()
    assert new[0].item() == first


def test_save_load_in_fresh_process_gives_identical_logits(family_path, tmp_path):
    _, path = family_path
    model, processor = load_model(path)
    batch = inputs(processor)
    with torch.no_grad():
        logits = model(**batch).logits
    torch.save(dict(batch), tmp_path / "batch.pt")
    script = textwrap.dedent(f"""
        import torch
        from webrl.models import load_model
        model, processor = load_model({path!r})
        assert type(processor).__name__.startswith("ImageOnly"), type(processor)
        batch = torch.load({str(tmp_path / 'batch.pt')!r})
        with torch.no_grad():
            torch.save(model(**batch).logits, {str(tmp_path / 'logits.pt')!r})
        ids = processor.tokenizer("[17] click(17)")["input_ids"]
        print(ids)
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert torch.equal(torch.load(tmp_path / "logits.pt"), logits)
    assert json.loads(run.stdout.strip().splitlines()[-1]) == processor.tokenizer("[17] click(17)")["input_ids"]


def test_saved_processors_name_the_stock_class_and_webrl_loads_its_image_only_one(tiny_qwen3vl_path):
    """A saved checkpoint names the stock processor (what vLLM, SGLang and plain transformers with
    torchvision load), with a video-processor entry and the legacy preprocessor_config.json;
    webrl's `load_processor` still builds the image-only class (the stock one needs torchvision)."""
    import json
    from pathlib import Path

    from webrl.models import ImageOnlyQwen3VLProcessor
    from webrl.models.processor import load_processor

    folder = Path(tiny_qwen3vl_path)
    saved = json.loads((folder / "processor_config.json").read_text())
    assert saved["processor_class"] == "Qwen3VLProcessor"
    assert saved["video_processor"]["video_processor_type"] == "Qwen3VLVideoProcessor"
    assert saved["video_processor"]["patch_size"] == saved["image_processor"]["patch_size"] == 16
    legacy = json.loads((folder / "preprocessor_config.json").read_text())
    assert legacy["processor_class"] == "Qwen3VLProcessor" and legacy["patch_size"] == 16
    assert json.loads((folder / "tokenizer_config.json").read_text())["processor_class"] == "Qwen3VLProcessor"
    processor = load_processor(str(folder), "qwen3_vl")
    assert isinstance(processor, ImageOnlyQwen3VLProcessor)
    assert processor.image_processor.patch_size == 16


def test_tiny_model_is_deterministic_from_seed(tmp_path):
    a = tiny_model("qwen2.5-vl", out_dir=tmp_path / "a", seed=3, return_objects=True)
    b = tiny_model("qwen2.5-vl", out_dir=tmp_path / "b", seed=3, return_objects=True)
    c = tiny_model("qwen2.5-vl", out_dir=tmp_path / "c", seed=4, return_objects=True)
    sa, sb, sc = (x[1].state_dict() for x in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (tmp_path / "b" / "tokenizer.json").read_text()


def test_custom_corpus_and_sizes(tmp_path):
    corpus = ["click the red button", "type hello into the box"] * 50
    path, model, processor = tiny_model("qwen3-vl", corpus=corpus, out_dir=tmp_path, hidden=64, layers=1,
                                        heads=2, return_objects=True)
    assert model.config.text_config.hidden_size == 64
    assert model.config.text_config.num_hidden_layers == 1
    assert "Ġbutton" in processor.tokenizer.get_vocab()


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="family"):
        TinyModelConfig(family="llama")
    with pytest.raises(ValueError, match="hidden"):
        TinyModelConfig(hidden=100, heads=4)


def test_load_model_rejects_other_architectures(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="not a Qwen2.5-VL"):
        load_model(tmp_path)
    with pytest.raises(ValueError, match="dtype"):
        load_model(tmp_path, dtype="float64")


def test_load_model_names_a_missing_folder_or_config(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="model folder not found: .*no-such-model"):
        load_model(missing)
    with pytest.raises(FileNotFoundError, match=r"config\.json is missing"):
        load_model(tmp_path)  # exists, but holds no config.json
