"""`vanilla-transformer demo` and `export --to space`: what the app computes for each view, and a Space folder that
runs on its own. The app in a real browser: tests/demo/test_demo_browser.py."""

import os
import resource
import shutil
import subprocess
import sys

import gradio as gr
import numpy as np
import pytest

from tests.apps import serving
from vanilla_transformer.cli import main
from vanilla_transformer.demo.app import (
    EMPTY_INPUT,
    MAX_SOURCE_TOKENS,
    MISSING_GRADIO,
    Demo,
    build_app,
    import_gradio,
    run_translation,
)
from vanilla_transformer.inference.translators import PyTorchTranslator
from vanilla_transformer.model_folder import load_model_folder

SOURCE = "three hundred twelve"


@pytest.fixture(scope="module")
def demo(trained_folder):
    return Demo(*load_model_folder(str(trained_folder)))


def test_translate_fills_the_translation_n_best_list_timing_and_every_picture(demo):
    outputs = run_translation(demo, gr, SOURCE, 2)
    translation, nbest, timing, stages = outputs[:4]
    translator = PyTorchTranslator(demo.model, demo.tokenizer)
    expected = translator.translate([SOURCE], num_beams=2, n_best=2, distinct=True)[0]
    assert translation == expected[0].text == stages.translation
    assert [row[:2] for row in nbest] == [[rank + 1, t.text] for rank, t in enumerate(expected)]
    assert [row[2] for row in nbest] == sorted((row[2] for row in nbest), reverse=True)
    assert timing.startswith("Translated in ") and "beam 2" in timing
    pictures = [value for value in outputs if isinstance(value, np.ndarray)]
    assert len(pictures) == 6  # alignment, attention map, embeddings, one sub-layer, every Add&Norm, feed-forward
    for picture in pictures:
        assert picture.ndim == 3 and picture.shape[2] == 3 and picture.dtype == np.uint8 and picture.std() > 0
    top_rows = outputs[-1]
    assert [row[1] for row in top_rows] == stages.target_tokens


def test_an_empty_input_is_a_message_for_the_user_not_a_traceback(demo):
    for text in ("", "   ", None):
        with pytest.raises(gr.Error, match=EMPTY_INPUT):
            run_translation(demo, gr, text, 2)


def test_half_a_character_or_a_text_too_long_to_draw_is_a_message_for_the_user(demo):
    with pytest.raises(gr.Error, match=r"Character 6 is half a character \(U\+D800\)"):
        run_translation(demo, gr, "forty\ud800", 2)
    with pytest.raises(gr.Error, match=f"at most {MAX_SOURCE_TOKENS} tokens .* this one has 3001 characters"):
        run_translation(demo, gr, "x" * 3001, 2)
    sentence = " ".join(["forty-two"] * 40)
    tokens = len(demo.tokenizer(sentence)["input_ids"])
    assert tokens > MAX_SOURCE_TOKENS and len(sentence) < 1000
    with pytest.raises(gr.Error, match=f"this one has {tokens} tokens. Translate longer texts with"):
        run_translation(demo, gr, sentence, 2)


def test_a_sentence_past_a_models_learned_positions_is_a_message_for_the_user(learned_folder):
    demo = Demo(*load_model_folder(str(learned_folder)))  # 18 learned positions
    sentence = " ".join(["forty-two"] * 8)
    tokens = len(demo.tokenizer(sentence)["input_ids"])
    assert 18 < tokens <= MAX_SOURCE_TOKENS
    with pytest.raises(gr.Error, match=f"at most 18 tokens and .* characters; this one has {tokens} tokens"):
        run_translation(demo, gr, sentence, 2)


def test_dollar_signs_and_braces_in_a_sentence_are_drawn_as_they_are():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from tests.conftest import tiny_model

    words = ["<pad>", "<s>", "</s>", "<unk>", "$", "{"] + [f"w{i}" for i in range(6, 50)]
    backend = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    demo = Demo(tiny_model(), tokenizer)
    for sentence in ("w7 $ w8 $ w9", "w7 $ { w8 $ w9"):  # two dollars: matplotlib's math notation, a brace its error
        pictures = [value for value in run_translation(demo, gr, sentence, 1) if isinstance(value, np.ndarray)]
        assert len(pictures) == 6


def test_the_beam_slider_reaches_the_models_own_beam(trained_folder):
    model, tokenizer = load_model_folder(str(trained_folder))
    model.generation_config.num_beams = 10
    app = build_app(model, tokenizer)
    [slider] = [block for block in app.blocks.values() if getattr(block, "elem_id", None) == "beams"]
    assert slider.value == 10 and slider.maximum == 10 and slider.preprocess(10) == 10


def test_without_gradio_the_demo_names_the_extra_to_install(monkeypatch, trained_folder, capsys):
    monkeypatch.setitem(sys.modules, "gradio", None)
    with pytest.raises(ImportError, match="vanilla-transformer\\[demo\\]"):
        import_gradio()
    assert main(["demo", "--model", str(trained_folder)]) == 1
    assert capsys.readouterr().err.strip() == f"error: {MISSING_GRADIO}"


def test_export_to_space_writes_a_folder_that_runs_on_its_own(trained_folder, tmp_path):
    space = tmp_path / "space"
    assert main(["export", "--model", str(trained_folder), "--to", "space", "--out", str(space)]) == 0
    for name in ("app.py", "requirements.txt", "README.md", "model/model.safetensors", "model/tokenizer.json"):
        assert (space / name).is_file(), name
    requirements = (space / "requirements.txt").read_text().split()
    assert {"gradio>=5", "matplotlib>=3.7"} <= set(requirements) and any(r.startswith("torch") for r in requirements)
    readme = (space / "README.md").read_text(encoding="utf-8")
    assert readme.startswith("---\n") and "sdk: gradio\n" in readme and "app_file: app.py\n" in readme
    # the inference layer only: the configuration, the model and the demo, no training code
    copied = {path.relative_to(space / "vanilla_transformer").parts[0] for path in space.rglob("vanilla_transformer/*")}
    assert {"configuration", "modeling", "demo", "inference", "model_folder.py"} <= copied and "training" not in copied
    # the app imports the package's copy beside it, not the installed package, and no training code
    probe = (
        "import sys, app, vanilla_transformer.modeling as m\n"
        "print(m.__file__)\n"
        "print(sorted(name for name in sys.modules if name.startswith('vanilla_transformer.training')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=space, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == [str(space / "vanilla_transformer" / "modeling" / "__init__.py"), "[]"]


def test_the_exported_space_serves_translations_over_gradios_api(trained_folder, tmp_path):
    from gradio_client import Client

    space = tmp_path / "space"
    assert main(["export", "--model", str(trained_folder), "--to", "space", "--out", str(space)]) == 0
    with serving([sys.executable, str(space / "app.py")], cwd=tmp_path) as url:
        result = Client(url, verbose=False).predict(SOURCE, 2, api_name="/translate")
    expected = PyTorchTranslator.from_folder(str(trained_folder)).translate([SOURCE], num_beams=2)[0][0].text
    assert result[0] == expected


def test_a_folder_that_is_not_a_model_is_named_once_by_its_flag(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for to in ("space", "ctranslate2"):
        out = str(tmp_path / f"out-{to}")
        assert main(["export", "--model", str(tmp_path / "empty"), "--to", to, "--out", out]) in (1, 2)
        error = capsys.readouterr().err
        assert error.startswith(f"error: --model {tmp_path / 'empty'}: ") and error.count("--model") == 1, error


def test_a_space_of_a_model_with_a_python_tokenizer_requires_that_tokenizers_packages(trained_folder, tmp_path):
    from tests import importing_sources as sources
    from vanilla_transformer import import_checkpoint
    from vanilla_transformer.exports.space import export_space

    sources.marian_folder(tmp_path / "marian")
    import_checkpoint(tmp_path / "marian", "marian", out=tmp_path / "imported")  # MarianTokenizer: sentencepiece
    export_space(str(tmp_path / "imported"), str(tmp_path / "space"))
    assert {"sentencepiece", "sacremoses"} <= set((tmp_path / "space" / "requirements.txt").read_text().split())
    export_space(str(trained_folder), str(tmp_path / "fast"))  # tokenizer.json: no more packages
    assert "sentencepiece" not in (tmp_path / "fast" / "requirements.txt").read_text()


def test_export_to_space_keeps_a_folder_with_files_and_rejects_quantization(trained_folder, tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["export", "--model", str(trained_folder), "--to", "space", "--out", str(out)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    args = ["export", "--model", str(trained_folder), "--to", "space", "--out", str(tmp_path / "new")]
    assert main(args + ["--quantization", "int8"]) == 2
    assert "--quantization applies to --to ctranslate2" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_a_spaces_title_of_any_characters_is_its_cards_title(trained_folder, tmp_path):
    import yaml

    odd = tmp_path / "odd: name #1"
    shutil.copytree(trained_folder, odd)
    assert main(["export", "--model", str(odd), "--to", "space", "--out", str(tmp_path / "space")]) == 0
    header = (tmp_path / "space" / "README.md").read_text(encoding="utf-8").split("---\n")[1]
    assert yaml.safe_load(header)["title"] == "vanilla-transformer odd: name #1"


def test_a_space_too_large_for_the_system_is_one_line_and_the_old_folder_stays(trained_folder, tmp_path):
    """A file size limit (`ulimit -f`): the weights' writer failed with a SafetensorError traceback."""
    out = tmp_path / "space"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    command = ["export", "--model", str(trained_folder), "--to", "space", "--out", str(out), "--overwrite"]
    script = f"import sys; from vanilla_transformer.cli import main; sys.exit(main({command!r}))"
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.RLIM_INFINITY))  # noqa: E731
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          preexec_fn=limit, env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1].startswith(f"error: --out {out}: could not be written: ")
    assert "File too large" in done.stderr.splitlines()[-1]
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and sorted(os.listdir(tmp_path)) == ["space"]


def test_demo_with_a_folder_that_is_not_a_model_says_so_before_serving(tmp_path, capsys):
    missing = tmp_path / "no-model"
    missing.mkdir()
    assert main(["demo", "--model", str(missing)]) == 1
    error = capsys.readouterr().err
    assert error == f"error: --model {missing}: no config.json, so not a model folder\n"


def test_demo_on_an_address_it_cannot_listen_on_says_so_before_loading(tmp_path, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["demo", "--model", str(tmp_path / "no-model"), "--port", str(port)]) == 2
        assert f"error: --host 127.0.0.1 --port {port}: cannot listen there" in capsys.readouterr().err
    assert main(["demo", "--model", str(tmp_path / "no-model"), "--host", "no-such-host.invalid"]) == 2
    assert "error: --host no-such-host.invalid: " in capsys.readouterr().err
    assert main(["demo", "--model", str(tmp_path / "no-model"), "--host", ""]) == 2  # every interface, unasked
    assert capsys.readouterr().err == "error: --host '': expected a host name or address (0.0.0.0: every interface)\n"


def test_the_demo_and_its_space_refuse_a_model_a_study_took_apart(tmp_path):
    from tests.conftest import tiny_model
    from vanilla_transformer.demo.app import build_app
    from vanilla_transformer.errors import ModelFolderError
    from vanilla_transformer.exports.space import SpaceExportError, export_space

    model = tiny_model(residual=False)
    with pytest.raises(ModelFolderError, match=r"changes Figure 1 \(\{'residual': False\}.*the paper's architecture"):
        build_app(model, tokenizer=None)
    with pytest.raises(SpaceExportError, match=r"changes Figure 1 \(\{'residual': False\}"):
        export_space(model, str(tmp_path / "space"), tokenizer=object())
    assert not (tmp_path / "space").exists()
