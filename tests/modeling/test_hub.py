"""Self-contained model folders: flat code and auto_map, loading with trust_remote_code in a process that cannot import
the package, the model card's Hub metadata, and what push_to_hub would upload (the Hub itself is not reachable, so
only the calls that would reach the network are intercepted)."""

import ast
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
from huggingface_hub import CommitOperationAdd, HfApi, ModelCard, RepoUrl
from huggingface_hub.errors import EntryNotFoundError
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from vanilla_transformer.modeling import hub_vanilla_transformer as hub

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main

from ..conftest import TINY_ARCHITECTURE_FLAGS, tiny_model, train_cli

SOURCES = ["one hundred twenty-three", "three hundred", "two hundred fifty-one"]

# Runs in a fresh interpreter in which `vanilla_transformer` cannot be imported (an import hook refuses it even if the
# package is installed in development mode), loads the folder through each Auto class with trust_remote_code=True,
# generates, saves the remote-code model again and reloads that copy.
REMOTE_SCRIPT = r"""
import importlib.abc, json, sys

class RefusePackage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "vanilla_transformer":
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, RefusePackage())
try:
    import vanilla_transformer  # noqa: F401
    raise SystemExit("vanilla_transformer is importable")
except ModuleNotFoundError:
    pass

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

folder, copy, sources = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
base = AutoModel.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
batch = tokenizer(sources, return_tensors="pt", padding=True)
tokens = model.generate(**batch, num_beams=2, max_new_tokens=12).tolist()
model.save_pretrained(copy)
tokenizer.save_pretrained(copy)
again = AutoModelForSeq2SeqLM.from_pretrained(copy, trust_remote_code=True).eval()
print(json.dumps({
    "config": type(config).__name__, "base": type(base).__name__, "model": type(model).__name__,
    "modules": sorted({type(m).__module__ for m in (config, base, model)}),
    "tokens": tokens, "tokens_again": again.generate(**batch, num_beams=2, max_new_tokens=12).tolist(),
    "package_modules": sorted(m for m in sys.modules if m.split(".")[0] == "vanilla_transformer"),
}))
"""


def run_without_package(folder, copy, tmp_path) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), PYTHONPATH="")
    done = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(folder), str(copy), json.dumps(SOURCES)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_save_pretrained_writes_a_self_contained_folder(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["config.json", "generation_config.json", "model.safetensors", "README.md", *hub.CODE_FILES]
    )
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"] == hub.AUTO_MAP
    modeling = (tmp_path / hub.MODELING_FILE).read_text()
    assert "from .configuration_vanilla_transformer import (\n    VanillaTransformerConfig," in modeling
    assert "from .." not in modeling  # the remote-code loader follows only same-folder imports
    with open(sys.modules[VanillaTransformerForConditionalGeneration.__module__].__file__) as handle:
        package_source = handle.read()
    assert modeling == package_source.replace(
        "from ..configuration.configuration_vanilla_transformer", "from .configuration_vanilla_transformer"
    )
    # the training run's card is rendered by the training stack from its own template: its text is not code that
    # every model folder carries
    hub_copy = (tmp_path / hub.HUB_FILE).read_text()
    assert "## Training procedure" not in hub_copy and "@inproceedings" not in hub_copy
    imports = [node for node in ast.walk(ast.parse(hub_copy)) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert all(node.level == 0 for node in imports if isinstance(node, ast.ImportFrom))  # nothing of the package
    modules = [alias.name for node in imports if isinstance(node, ast.Import) for alias in node.names]
    modules += [node.module for node in imports if isinstance(node, ast.ImportFrom)]
    assert not any(module.split(".")[0] == "vanilla_transformer" for module in modules), modules


def test_save_pretrained_keeps_an_existing_model_card(tmp_path):
    (tmp_path / "README.md").write_text("my own card\n")
    tiny_model().save_pretrained(tmp_path)
    assert (tmp_path / "README.md").read_text() == "my own card\n"


def test_trained_folder_loads_in_a_process_that_cannot_import_the_package(trained_folder, tmp_path):
    model = AutoModelForSeq2SeqLM.from_pretrained(trained_folder).eval()  # the package is installed here
    assert type(model) is VanillaTransformerForConditionalGeneration
    tokenizer = AutoTokenizer.from_pretrained(trained_folder)
    batch = tokenizer(SOURCES, return_tensors="pt", padding=True)
    expected = model.generate(**batch, num_beams=2, max_new_tokens=12).tolist()

    remote = run_without_package(trained_folder, tmp_path / "copy", tmp_path)
    assert remote["config"] == "VanillaTransformerConfig"
    assert remote["base"] == "VanillaTransformerModel"
    assert remote["model"] == "VanillaTransformerForConditionalGeneration"
    assert all(module.startswith("transformers_modules.") for module in remote["modules"]), remote["modules"]
    assert remote["package_modules"] == []
    assert remote["tokens"] == expected
    assert remote["tokens_again"] == expected  # a remote-code model saves a self-contained folder too
    assert set(hub.CODE_FILES) <= set(os.listdir(tmp_path / "copy"))
    # the remote-code model carries the run's card into the folder it saves, as the package's model does
    assert (tmp_path / "copy" / "README.md").read_bytes() == (trained_folder / "README.md").read_bytes()


def test_trained_folder_model_card_has_hub_metadata(trained_folder):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        card = ModelCard.load(trained_folder / "README.md")
    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "translation"
    assert data.language == ["en", "de"] and data.license == "apache-2.0"
    results = json.loads((trained_folder / "eval_results.json").read_text())
    by_name = {(r.dataset_split, r.metric_name): r.metric_value for r in data.eval_results}
    for split in ("validation", "test"):
        assert by_name[(split, "BLEU")] == results[split]["bleu"]
        assert by_name[(split, "BLEU (lowercased)")] == results[split]["bleu_lowercase"]
        assert by_name[(split, "chrF")] == results[split]["chrf"]
    assert results["test"]["bleu_signature"] in card.text
    assert "Attention Is All You Need" in card.text and "trust_remote_code=True" in card.text
    sections = ["Architecture", "Intended use and limits", "Training data", "Training procedure", "Evaluation"]
    places = [card.text.index(f"\n## {name}\n") for name in sections + ["How to use", "Citation"]]
    assert places == sorted(places)
    # the optimiser as the run was trained with it (the training arguments' defaults)
    assert "\n- Adam (beta1 0.9, beta2 0.98, eps 1e-9), peak learning rate 0.003 reached after 10 warm-up" in card.text


def scores(card: ModelCard) -> dict:
    return {(r.dataset_split, r.metric_name): r.metric_value for r in card.data.eval_results or []}


def test_a_model_loaded_from_a_run_folder_saves_the_runs_card(trained_folder, tmp_path):
    model = AutoModelForSeq2SeqLM.from_pretrained(trained_folder)
    model.save_pretrained(tmp_path / "copy")
    assert (tmp_path / "copy" / "README.md").read_bytes() == (trained_folder / "README.md").read_bytes()
    results = json.loads((trained_folder / "eval_results.json").read_text())
    card = ModelCard.load(tmp_path / "copy" / "README.md")
    assert scores(card)[("test", "BLEU")] == results["test"]["bleu"]
    assert "# model" in card.text and "Not evaluated" not in card.text
    assert "README" not in (tmp_path / "copy" / "config.json").read_text()  # the card is not config
    # the copy has the card too, so a model loaded from it passes the card on again
    again, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "copy", output_loading_info=True)
    assert not info["missing_keys"]
    again.save_pretrained(tmp_path / "again")
    assert (tmp_path / "again" / "README.md").read_bytes() == (trained_folder / "README.md").read_bytes()


def test_a_model_trained_further_after_loading_no_longer_claims_the_runs_scores(trained_folder, tmp_path):
    model = AutoModelForSeq2SeqLM.from_pretrained(trained_folder)
    batch = AutoTokenizer.from_pretrained(trained_folder)(
        ["forty-two"], text_target=["zweiundvierzig"], return_tensors="pt"
    )
    model(**batch).loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()  # one fine-tuning update
    model.save_pretrained(tmp_path / "tuned")
    card = ModelCard.load(tmp_path / "tuned" / "README.md")
    assert "Not evaluated" in card.text and scores(card) == {}  # the run's scores describe the run's weights only


def test_a_model_loaded_from_the_hub_cache_saves_the_repositorys_card(trained_folder, tmp_path):
    # the layout huggingface_hub downloads into: the files of a revision under snapshots/, the branch under refs/
    repo = tmp_path / "cache" / "models--someone--numbers"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for name in os.listdir(trained_folder):
        if (trained_folder / name).is_file():
            (snapshot / name).write_bytes((trained_folder / name).read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    model = AutoModelForSeq2SeqLM.from_pretrained("someone/numbers", cache_dir=tmp_path / "cache")
    model.save_pretrained(tmp_path / "copy")
    assert (tmp_path / "copy" / "README.md").read_bytes() == (trained_folder / "README.md").read_bytes()


def test_a_model_without_a_card_gets_the_generic_card(tmp_path):
    model = tiny_model(norm_position="pre")
    model.save_pretrained(tmp_path / "made")
    generic = ModelCard.load(tmp_path / "made" / "README.md")
    assert "Not evaluated" in generic.text and scores(generic) == {}
    data = generic.data
    assert data.library_name == "transformers" and data.pipeline_tag == "translation"
    assert data.license == "apache-2.0" and "vanilla-transformer" in data.tags
    assert generic.text.lstrip().startswith("# vanilla-transformer translation model")
    assert "Attention Is All You Need" in generic.text and "trust_remote_code=True" in generic.text
    c = model.config
    row = f"| {c.d_model} | {c.num_heads} | {c.d_ff} | {c.encoder_layers} | {c.decoder_layers} | pre-norm | sinusoidal "
    assert row + f"| {c.vocab_size} | {model.num_parameters():,} |" in generic.text
    # the data, the procedure and the scores are a training run's (training/report/card.py), not the generic card's
    assert "## Training procedure" not in generic.text
    (tmp_path / "made" / "README.md").unlink()
    AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "made").save_pretrained(tmp_path / "copy")
    copied = ModelCard.load(tmp_path / "copy" / "README.md")
    assert "Not evaluated" in copied.text and scores(copied) == {}


def test_save_pretrained_keeps_an_existing_card_over_the_loaded_one(trained_folder, tmp_path):
    (tmp_path / "README.md").write_text("my own card\n")
    AutoModelForSeq2SeqLM.from_pretrained(trained_folder).save_pretrained(tmp_path)
    assert (tmp_path / "README.md").read_text() == "my own card\n"


class HubCalls:
    """Stands in for the Hub's side of the network: records created repositories and commits."""

    def __init__(self, monkeypatch):
        self.repos, self.commits = [], []
        monkeypatch.setattr(HfApi, "create_repo", lambda api, *args, **kwargs: self.create_repo(*args, **kwargs))
        monkeypatch.setattr(HfApi, "create_commit", lambda api, *args, **kwargs: self.create_commit(*args, **kwargs))
        card_load = ModelCard.load.__func__

        def load(cls, repo_id_or_path, *args, **kwargs):  # a new repository has no README.md yet
            if os.path.exists(repo_id_or_path):
                return card_load(cls, repo_id_or_path, *args, **kwargs)
            raise EntryNotFoundError(f"{repo_id_or_path} has no README.md")

        monkeypatch.setattr(ModelCard, "load", classmethod(load))

    def create_repo(self, repo_id, *args, **kwargs):
        self.repos.append(repo_id)
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def create_commit(self, repo_id, operations, *args, **kwargs):
        files = {}
        for op in operations:
            assert isinstance(op, CommitOperationAdd)
            source = op.path_or_fileobj
            if isinstance(source, (str, os.PathLike)):
                with open(source, "rb") as handle:
                    files[op.path_in_repo] = handle.read()
            else:
                files[op.path_in_repo] = bytes(source)
        self.commits.append({"repo_id": repo_id, "files": files, "message": kwargs.get("commit_message")})
        return None


def test_model_push_to_hub_uploads_the_self_contained_folder(monkeypatch, tmp_path):
    calls = HubCalls(monkeypatch)
    model = tiny_model()
    model.push_to_hub("someone/tiny-vanilla", tags=["numbers"])
    assert calls.repos == ["someone/tiny-vanilla"]
    (commit,) = calls.commits
    files = commit["files"]
    assert sorted(files) == sorted(
        ["config.json", "generation_config.json", "model.safetensors", "README.md", *hub.CODE_FILES]
    )
    assert json.loads(files["config.json"])["auto_map"] == hub.AUTO_MAP
    (tmp_path / "model.safetensors").write_bytes(files["model.safetensors"])
    uploaded = load_file(tmp_path / "model.safetensors")
    state = model.state_dict()
    for name, tensor in uploaded.items():
        assert torch.equal(tensor, state[name]), name
    (tmp_path / "README.md").write_bytes(files["README.md"])
    assert "numbers" in ModelCard.load(tmp_path / "README.md").data.tags
    assert "Not evaluated" in ModelCard.load(tmp_path / "README.md").text  # a model made from a config: generic card
    model.save_pretrained(tmp_path / "local")
    for name in hub.CODE_FILES:
        assert files[name] == (tmp_path / "local" / name).read_bytes()


def test_push_to_hub_of_a_loaded_run_uploads_the_runs_card(monkeypatch, trained_folder, tmp_path):
    calls = HubCalls(monkeypatch)
    AutoModelForSeq2SeqLM.from_pretrained(trained_folder).push_to_hub("someone/numbers", tags=["numbers"])
    (commit,) = calls.commits
    (tmp_path / "README.md").write_bytes(commit["files"]["README.md"])
    uploaded, run = ModelCard.load(tmp_path / "README.md"), ModelCard.load(trained_folder / "README.md")
    assert scores(uploaded) == scores(run) and ("test", "BLEU") in scores(uploaded)
    assert uploaded.text == run.text
    assert uploaded.data.tags == run.data.tags + ["numbers"]
    AutoModelForSeq2SeqLM.from_pretrained(trained_folder).push_to_hub("someone/numbers-untagged")
    assert calls.commits[-1]["files"]["README.md"] == (trained_folder / "README.md").read_bytes()


def test_tokenizer_push_to_hub_uploads_the_tokenizer_files(monkeypatch, trained_folder):
    calls = HubCalls(monkeypatch)
    AutoTokenizer.from_pretrained(trained_folder).push_to_hub("someone/tiny-vanilla")
    (commit,) = calls.commits
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(commit["files"])
    assert json.loads(commit["files"]["tokenizer.json"]) == json.loads((trained_folder / "tokenizer.json").read_text())


def test_train_push_to_hub_uploads_the_model_folder_but_not_checkpoints(monkeypatch, tmp_path, trained_folder):
    calls = HubCalls(monkeypatch)
    files = {split: trained_folder.parent / f"{split}.jsonl" for split in ("train", "validation")}
    out = tmp_path / "run"
    code = train_cli(
        files,
        out,
        "--max-steps 4 --save-steps 2 --eval-steps 0",
        *TINY_ARCHITECTURE_FLAGS,
        "--num-beams 1 --report-to none --max-target-length 8",
        "--show-samples 0 --push-to-hub",
        "--hub-model-id someone/numbers-en-de",
    )
    assert code == 0
    assert calls.repos == ["someone/numbers-en-de"]
    (commit,) = calls.commits
    top_level = sorted(name for name in os.listdir(out) if (out / name).is_file())
    assert sorted(commit["files"]) == top_level
    assert (out / "checkpoints").is_dir() and not any("/" in name for name in commit["files"])
    for name in ("model.safetensors", "config.json", "tokenizer.json", "README.md", *hub.CODE_FILES):
        assert commit["files"][name] == (out / name).read_bytes(), name
    assert ModelCard.load(out / "README.md").data.model_name == "someone/numbers-en-de"


def test_push_to_hub_flags_are_checked(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--push-to-hub"])
    assert "--push-to-hub needs --hub-model-id" in capsys.readouterr().err
