"""`ablate`'s own flags (training/studies/arguments.py): which studies and which of their variants run."""

import os

import pytest
from vanilla_transformer.training.studies.arguments import VARIANT_KEYS, StudyArguments
from vanilla_transformer.training.studies.variants import BASE, LESSONS, STUDIES, TABLE3

from vanilla_transformer.cli import main


def keys(studies: dict) -> dict[str, list[str]]:
    return {name: [variant.key for variant in variants] for name, variants in studies.items()}


def test_without_variants_each_study_runs_whole():
    assert StudyArguments().studies() == STUDIES
    assert StudyArguments(study=["lessons"]).studies() == {"lessons": LESSONS}


def test_variants_keep_the_base_and_leave_out_a_study_without_any_of_them():
    chosen = StudyArguments(variants=["no-decoder-mask", "heads-8", "no-residual"]).studies()
    assert keys(chosen) == {"table3": ["base", "heads-8"], "lessons": ["base", "no-residual", "no-decoder-mask"]}
    assert chosen["table3"][0] is BASE and chosen["lessons"][0] is BASE  # the variants' order is the study's
    assert keys(StudyArguments(variants=["heads-8"]).studies()) == {"table3": ["base", "heads-8"]}
    assert set(VARIANT_KEYS) == {variant.key for variant in TABLE3 + LESSONS} - {"base"}


@pytest.mark.parametrize(
    "given, message",
    [
        (dict(variants=["no-residuals"]), "--variants: 'no-residuals'; expected one of heads-1, "),
        (dict(study=["table2"]), "--study: 'table2'; expected one of table3, lessons"),
        (dict(study=["table3"], variants=["no-residual"]), "--variants no-residual: none of them is a variant of "
         "--study table3"),
        (dict(study=["lessons"], variants=["no-residual", "heads-1"]), "--variants heads-1: not a variant of "
         "--study lessons; add their study to --study or leave them out"),
    ],
    ids=["unknown", "unknown-study", "not-in-the-study", "some-not-in-the-study"],
)  # fmt: skip
def test_variants_that_cannot_run_are_refused_naming_the_flag(given, message):
    with pytest.raises(ValueError) as refused:
        StudyArguments(**given)
    assert str(refused.value).startswith(message)


def test_the_command_refuses_them_with_its_usage(capsys):
    for flags, message in (
        (["--variants", "no-residuals"], "argument --variants: invalid choice: 'no-residuals'"),
        (["--study", "table3", "--variants", "no-residual"], "--variants no-residual: none of them is a variant"),
    ):
        with pytest.raises(SystemExit) as stopped:
            main(["ablate", *flags])
        assert stopped.value.code == 2
        assert f"vanilla-transformer ablate: error: {message}" in capsys.readouterr().err


def test_a_study_folder_that_is_a_file_is_refused_with_the_usage(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text("{}\n")
    with pytest.raises(SystemExit) as stopped:
        main(["ablate", "--study-dir", str(data)])
    assert stopped.value.code == 2
    assert f"error: --study-dir {data}: is a file; expected a folder" in capsys.readouterr().err
    assert data.read_text() == "{}\n"


def test_a_folder_with_files_under_a_studys_table_names_but_no_runs_is_refused(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("my own data\n")
    with pytest.raises(SystemExit) as stopped:
        main(["ablate", "--study-dir", str(mine)])
    assert stopped.value.code == 2
    assert f"--study-dir {mine} holds results.csv but no study's runs/: a study would replace them" in (
        capsys.readouterr().err
    )
    assert os.listdir(mine) == ["results.csv"] and (mine / "results.csv").read_text() == "my own data\n"


def test_a_study_folder_in_a_model_folder_and_more_jobs_than_workers_are_refused(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "vanilla_transformer"}')
    refused = {
        ("--study-dir", str(model)): f"--study-dir {model} is the model folder {model}: give a folder of its own",
        ("--study-dir", str(model / "studies" / "a")): f"is inside the model folder {model}: give a folder of its own",
        ("--study-dir", str(tmp_path / "s"), "--jobs", "100000"): "--jobs 100000: more runs at once than this machine",
        ("--study-dir", str(tmp_path / "s"), "--seeds", "101"): "--seeds 101: at most 100 runs of each variant",
        ("--study-dir", str(tmp_path / "s"), "--launcher", "'open"): "--launcher 'open: No closing quotation; expected",
        ("--study-dir", str(tmp_path / "s"), "--seed", "4294967295", "--seeds", "2"): "--seed 4294967295 --seeds 2: "
        "the last run's seed would pass 4294967295",
    }
    for flags, message in refused.items():
        with pytest.raises(SystemExit) as stopped:
            main(["ablate", *flags])
        assert stopped.value.code == 2
        assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"] and os.listdir(model) == ["config.json"]


def test_a_study_without_matplotlib_is_refused_before_any_run_trains(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of matplotlib now fails
    assert main(["ablate", "--study-dir", str(tmp_path / "study")]) == 1
    assert "error: the study's figure (results.png): plots need matplotlib: pip install" in capsys.readouterr().err
    assert not (tmp_path / "study").exists()
