"""Where a translator runs and in what precision: `Placement`, its errors, the flags of every inference command, the
engines' declared capabilities, the pipeline's device, and (marked `gpu`) every command on a CUDA device."""

import json

import pytest
import torch
from transformers import pipeline
from vanilla_transformer.training.tasks.numbers import english

from tests.documents import EXAMPLE_MODEL
from vanilla_transformer.cli import main
from vanilla_transformer.exports.ctranslate2 import export_ctranslate2
from vanilla_transformer.inference.devices import Placement, PlacementError
from vanilla_transformer.inference.options import SearchOptions
from vanilla_transformer.inference.translators import (
    CTranslate2Translator,
    PyTorchTranslator,
    UnsupportedError,
    load_translator,
)

SENTENCES = [english(n) for n in range(1, 1000, 5)]  # 200 sentences


@pytest.mark.parametrize(
    "placement, option, message",
    [
        (Placement(device="tpu"), "device", "expected auto, cpu, cuda or cuda:N"),
        (Placement(device="cuda:99"), "device", "CUDA"),
        (Placement(device="cpu", dtype="float16"), "dtype", "does not run float16 on the CPU"),
        (Placement(device="cpu", dtype="int4"), "dtype", "expected auto, float32, bfloat16, float16"),
    ],
)
def test_a_placement_the_machine_cannot_run_is_named(placement, option, message):
    with pytest.raises(PlacementError, match=message) as caught:
        placement.torch_dtype(placement.torch_device())
    assert caught.value.option == option and str(caught.value).startswith(f"{option}=")


@pytest.mark.parametrize(
    "option, value", [("threads", 0), ("threads", -1), ("threads", 1.5), ("threads", 10**6), ("inter_threads", 0)]
)
def test_a_thread_count_that_is_no_whole_number_from_1_to_1024_is_named(option, value):
    with pytest.raises(PlacementError, match=rf"{option}={value}: expected a whole number from 1 to 1024"):
        Placement(**{option: value})


def test_auto_is_the_cpu_in_float32_without_cuda_and_each_engine_refuses_the_others_options():
    if not torch.cuda.is_available():
        device = Placement().torch_device()
        assert device.type == "cpu" and Placement().torch_dtype(device) == torch.float32
    with pytest.raises(PlacementError, match="inter_threads=2: batches in parallel need the CTranslate2 engine"):
        Placement(inter_threads=2).check_torch()
    with pytest.raises(PlacementError, match="compute_type='int8': the CTranslate2 engine's precision"):
        Placement(compute_type="int8").check_torch()
    with pytest.raises(PlacementError, match="dtype='bfloat16': the torch engine's precision"):
        Placement(dtype="bfloat16").check_ctranslate2()


@pytest.fixture(scope="module")
def exported_example(tmp_path_factory):
    return export_ctranslate2(str(EXAMPLE_MODEL), str(tmp_path_factory.mktemp("ct2") / "model"))


def command_lines(tmp_path, exported: str) -> dict:
    """Each inference command with a model folder (and an exported one where it takes one)."""
    sources, targets = tmp_path / "sources.txt", tmp_path / "targets.txt"
    sources.write_text("forty-two\n", encoding="utf-8")
    targets.write_text("zweiundvierzig\n", encoding="utf-8")
    model = str(EXAMPLE_MODEL)
    return {
        "translate": (["translate", "--model", model, "seven"], ["translate", "--model", exported, "seven"]),
        "score": (["score", "--model", model, "--source-file", str(sources), "--target-file", str(targets)], None),
        "evaluate": (["evaluate", "--model", model, "--test-file", str(tmp_path / "none.jsonl")], None),
        "serve": (["serve", model], ["serve", exported]),
        "demo": (["demo", "--model", model], None),
    }


@pytest.mark.parametrize("command", ["translate", "score", "evaluate", "serve", "demo"])
@pytest.mark.parametrize(
    "flags, named",
    [
        (["--device", "cuda:99"], "--device cuda:99: "),
        (["--device", "tpu"], "--device tpu: expected auto, cpu, cuda or cuda:N"),
        (
            ["--device", "cpu", "--dtype", "float16"],
            "--dtype float16: the torch engine does not run float16 on the CPU",
        ),
    ],
)
def test_every_command_names_a_device_or_precision_it_cannot_use(
    command, flags, named, tmp_path, exported_example, capsys
):
    argv, _ = command_lines(tmp_path, exported_example)[command]
    assert main([*argv, *flags]) == 2
    assert f"error: {named}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["translate", "serve"])
def test_each_engine_names_the_precision_flag_of_the_other(command, tmp_path, exported_example, capsys):
    model, exported = command_lines(tmp_path, exported_example)[command]
    assert main([*model, "--compute-type", "int8"]) == 2
    assert (
        "--compute-type int8: the CTranslate2 engine's precision: the torch engine takes dtype"
        in capsys.readouterr().err
    )
    assert main([*exported, "--dtype", "bfloat16"]) == 2
    assert "--dtype bfloat16: the torch engine's precision" in capsys.readouterr().err
    assert main([*exported, "--device", "cpu", "--compute-type", "float16"]) == 2
    assert "--compute-type float16: CTranslate2 on cpu computes in " in capsys.readouterr().err


def test_translate_on_the_cpu_in_bfloat16_writes_the_float32_translations(capsys):
    lines = {}
    for dtype in ("float32", "bfloat16"):
        assert (
            main(["translate", "--model", str(EXAMPLE_MODEL), "--device", "cpu", "--dtype", dtype, *SENTENCES[:40]])
            == 0
        )
        lines[dtype] = capsys.readouterr().out.splitlines()
    same = sum(a == b for a, b in zip(lines["float32"], lines["bfloat16"]))
    assert len(lines["bfloat16"]) == 40 and same >= 38, same


def test_the_translator_runs_where_its_placement_says():
    translator = load_translator(str(EXAMPLE_MODEL), placement=Placement(device="cpu", dtype="bfloat16"))
    assert translator.device.type == "cpu" and translator.model.dtype == torch.bfloat16
    [[best]] = translator.translate(["forty-two"], SearchOptions(num_beams=5))
    assert best.text == "zweiundvierzig"
    with pytest.raises(TypeError, match=r"placement must be a Placement, got \{'device': 'cpu'\}"):
        load_translator(str(EXAMPLE_MODEL), placement={"device": "cpu"})


@pytest.mark.parametrize("device", ["cpu", -1, torch.device("cpu")])
def test_the_pipeline_takes_a_device_as_transformers_documents_it(device):
    translate = pipeline("translation", model=str(EXAMPLE_MODEL), device=device)
    assert translate.device.type == "cpu"
    assert translate(["forty-two"], num_beams=5) == [{"translation_text": "zweiundvierzig"}]


def test_each_engine_declares_what_it_can_do(exported_example):
    torch_engine, exported = load_translator(str(EXAMPLE_MODEL)), load_translator(exported_example)
    assert isinstance(torch_engine, PyTorchTranslator) and isinstance(exported, CTranslate2Translator)
    assert torch_engine.capabilities.terms and torch_engine.capabilities.alignments
    assert not exported.capabilities.terms and not exported.capabilities.alignments
    assert exported.capabilities.parallel_batches and not torch_engine.capabilities.parallel_batches
    for options in (SearchOptions(terms=[["sieben"]]), SearchOptions(alignment=True)):
        for sentences in (["seven"], [" "]):  # blank sentences alone are refused alike
            with pytest.raises(UnsupportedError, match="the ctranslate2 engine has no"):
                exported.translate(sentences, options)
        assert torch_engine.translate(["seven"], options)[0][0].text == "sieben"


def test_a_ctranslate2_translator_that_cannot_decode_on_its_card_is_named_as_the_devices_problem(exported_example):
    import ctranslate2

    from vanilla_transformer.inference.translators import runs_on_cuda

    translator = ctranslate2.Translator(exported_example, device="cpu")
    runs_on_cuda(translator, Placement(device="cuda"), ctranslate2.__version__)  # decodes: nothing raised
    while translator.model_is_loaded:  # its next decoding step fails in CTranslate2, as a missing CUDA library makes it
        translator.unload_model()  # which does nothing while the last decoding still holds the translator
    with pytest.raises(PlacementError, match=r"device='cuda:1': CTranslate2 .* cannot run on this machine's CUDA"):
        runs_on_cuda(translator, Placement(device="cuda:1"), ctranslate2.__version__)


def test_alignments_come_from_the_tokens_the_search_wrote():
    translator = load_translator(str(EXAMPLE_MODEL), placement=Placement(device="cpu"))
    found = translator.translate(SENTENCES[:20], num_beams=5, alignment=True)
    texts = [translations[0].text for translations in found]
    again = translator.align(SENTENCES[:20], texts)
    for [best], realigned in zip(found, again):
        eos = translator.model.config.eos_token_id
        assert best.tokens[-1] == eos and len(best.alignment.token_pairs) == len(best.tokens) - 1
        assert translator.tokenizer.decode(best.tokens, skip_special_tokens=True).strip() == best.text
        assert best.alignment.word_pairs == realigned.word_pairs  # these encode back to the same tokens
    assert translator.translate([""], alignment=True)[0][0].alignment.pharaoh() == ""


# on a CUDA device: bench/gpu/checks.sh runs these


@pytest.mark.gpu
def test_translate_evaluate_and_score_on_cuda_in_bfloat16_agree_with_float32(tmp_path, capsys):
    lines = {}
    for dtype in ("float32", "bfloat16"):
        assert main(["translate", "--model", str(EXAMPLE_MODEL), "--device", "cuda", "--dtype", dtype, *SENTENCES]) == 0
        lines[dtype] = capsys.readouterr().out.splitlines()
    same = sum(a == b for a, b in zip(lines["float32"], lines["bfloat16"]))
    print(f"translate on cuda: bfloat16 writes the float32 translation of {same} of {len(SENTENCES)} sentences")
    assert len(lines["bfloat16"]) == len(SENTENCES) and same >= 0.98 * len(SENTENCES)
    test = tmp_path / "test.jsonl"
    test.write_text("".join(json.dumps({"translation": {"en": s, "de": t}}) + "\n"
                            for s, t in zip(SENTENCES[:50], lines["float32"])), encoding="utf-8")  # fmt: skip
    scores = {}
    for dtype in ("float32", "bfloat16"):
        assert main(["evaluate", "--model", str(EXAMPLE_MODEL), "--test-file", str(test), "--device", "cuda",
                     "--dtype", dtype, "--source-lang", "en", "--target-lang", "de"]) == 0  # fmt: skip
        scores[dtype] = json.loads(capsys.readouterr().out)
    assert scores["bfloat16"]["test_exact_match"] >= scores["float32"]["test_exact_match"] - 2.0
    sources, targets = tmp_path / "sources.txt", tmp_path / "targets.txt"
    sources.write_text("\n".join(SENTENCES[:50]) + "\n", encoding="utf-8")
    targets.write_text("\n".join(lines["float32"][:50]) + "\n", encoding="utf-8")
    logs = {}
    for dtype in ("float32", "bfloat16"):
        assert main(["score", "--model", str(EXAMPLE_MODEL), "--source-file", str(sources), "--target-file",
                     str(targets), "--device", "cuda", "--dtype", dtype]) == 0  # fmt: skip
        logs[dtype] = [json.loads(line)["normalized"] for line in capsys.readouterr().out.splitlines()]
    assert logs["bfloat16"] == pytest.approx(logs["float32"], abs=0.05)


@pytest.mark.gpu
def test_the_ctranslate2_engine_runs_on_cuda_in_float16(exported_example, capsys):
    lines = {}
    for flags in (["--device", "cpu"], ["--device", "cuda", "--compute-type", "float16"]):
        status = main(["translate", "--model", exported_example, *flags, *SENTENCES])
        output = capsys.readouterr()
        if status != 0 and "cannot run on this machine's CUDA" in output.err:  # a wheel for another CUDA version
            pytest.skip(output.err.strip())
        assert status == 0, output.err
        lines[flags[1]] = output.out.splitlines()
    same = sum(a == b for a, b in zip(lines["cpu"], lines["cuda"]))
    print(f"ctranslate2 on cuda in float16: the CPU's float32 translation of {same} of {len(SENTENCES)} sentences")
    assert same >= 0.98 * len(SENTENCES)


@pytest.mark.gpu
def test_the_server_on_cuda_answers_libretranslate_clients():
    from libretranslatepy import LibreTranslateAPI

    from tests.serving.conftest import serving

    with serving(EXAMPLE_MODEL, "--device", "cuda") as server:
        assert LibreTranslateAPI(server.url).translate("forty-two", "en", "de") == "zweiundvierzig"
