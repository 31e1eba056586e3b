"""`vanilla-transformer plot`: the training curves of a finished run or of one still writing its metrics."""

import json

import matplotlib.image
from vanilla_transformer.training.report.plots import read_metrics

from vanilla_transformer.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(folder, steps, partial_last_line=False):
    folder.mkdir()
    lines = [
        json.dumps(
            {
                "step": s,
                "epoch": 0,
                "loss": 5.0 / s,
                "nll_loss": 4.5 / s,
                "lr": 1e-3 * min(1, s / 4),
                "target_tokens": 100,
                **({"validation_bleu": 2.0 * s} if s % 5 == 0 else {}),
            }
        )
        for s in range(1, steps + 1)
    ]
    text = "\n".join(lines) + "\n" + ('{"step": 99, "lo' if partial_last_line else "")
    (folder / "metrics.jsonl").write_text(text)
    return folder


def check_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000
    height, width = matplotlib.image.imread(path).shape[:2]
    assert width > height >= 300


def test_plot_draws_the_curves_of_a_finished_run(trained_folder, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert main(["plot", str(trained_folder), "--out", str(out)]) == 0
    check_png(out)
    check_png(trained_folder / "training_curves.png")  # written by the training command itself


def test_plot_reads_a_run_that_is_still_writing(tmp_path):
    run = write_run(tmp_path / "run", steps=12, partial_last_line=True)
    assert [r["step"] for r in read_metrics(str(run))] == list(range(1, 13))
    assert main(["plot", str(run)]) == 0
    check_png(run / "training_curves.png")


def test_plot_of_a_folder_that_is_not_a_run_names_it(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) != 0
    assert "no metrics.jsonl" in capsys.readouterr().err


def test_a_record_without_an_updates_fields_or_not_utf8_is_named_by_file_and_line(tmp_path, capsys):
    run = write_run(tmp_path / "run", steps=3)
    metrics = run / "metrics.jsonl"
    good = metrics.read_bytes()
    cases = {
        b'{"step": 4, "loss": 2.0}\n': "no nll_loss, lr; an update's record has step, loss, nll_loss, lr",
        b'["step"]\n': "no step, loss, nll_loss, lr; an update's record has step, loss, nll_loss, lr",
        b"\xff\xfe\n": "not UTF-8 (invalid start byte at byte 0)",
        b'{"step": 4, "loss": 2.0, "nll_loss": [1], "lr": 0.1}\n': "nll_loss is [1]; expected a number",
        b'{"step": 4, "lo\n{"step": 5, "loss": 2.0, "nll_loss": 1.9, "lr": 0.1}\n': "not JSON, and records follow it",
        b"[" * 5000 + b"]" * 5000 + b'\n{"step": 5, "loss": 2.0, "nll_loss": 1.9, "lr": 0.1}\n':  # too deep for Python
        "not JSON, and records follow it",
        b'{"step": 4, "loss": 2.0, "nll_loss": 1.9, "lr": 0.1, "validation_bleu": "abc"}\n':  # drawn as a category
        "validation_bleu is 'abc'; expected a number",
        b'{"step": 4, "loss": 2.0, "nll_loss": 1.9, "lr": 0.1, "validation_cross_entropy": {"a": 1}}\n':  # a traceback
        "validation_cross_entropy is {'a': 1}; expected a number",
    }
    for extra, message in cases.items():
        metrics.write_bytes(good + extra)
        assert main(["plot", str(run)]) == 2
        assert capsys.readouterr().err == f"error: {metrics} line 4: {message}\n"
    assert not (run / "training_curves.png").exists()


def test_plot_refuses_an_out_it_cannot_write_before_drawing(tmp_path, capsys):
    run = write_run(tmp_path / "run", steps=3)
    cases = {
        str(tmp_path / "no-folder" / "c.png"): f"its folder {tmp_path / 'no-folder'} does not exist",
        str(tmp_path): "is a folder; expected a file name",
        str(tmp_path / "curves"): "expected an image file name ending in ",  # matplotlib's formats follow
    }
    for out, message in cases.items():
        assert main(["plot", str(run), "--out", out]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --out {out}: {message}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]
    assert main(["plot", str(run), "--out", str(tmp_path / "curves.svg")]) == 0  # any format matplotlib writes
    assert (tmp_path / "curves.svg").read_text().lstrip().startswith("<?xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.svg", "run"]  # and no temporary file left


def test_curves_that_cannot_be_written_in_the_run_folder_are_one_line(tmp_path, capsys):
    """The default image, written in the run's folder, was never checked: a failed write was a traceback."""
    run = write_run(tmp_path / "run", steps=3)
    (run / "training_curves.png").mkdir()  # in the way, as a folder that cannot be written would be
    assert main(["plot", str(run)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run / 'training_curves.png'}: could not be written: ") and "Traceback" not in err
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl", "training_curves.png"]  # no temporary left


def test_the_embedded_tasks_curve_is_exact_match_and_a_corpuss_bleu(tmp_path):
    """Every output of the embedded task is one word: its BLEU is 0 however right, so its curve is exact match."""
    run = write_run(tmp_path / "run", steps=10)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    scored = {"validation_exact_match": 4.0}  # every evaluation's; the figures by digit count the embedded task's only
    (run / "metrics.jsonl").write_text("".join(json.dumps({**r, **scored} if "validation_bleu" in r else r) + "\n"
                                               for r in records))  # fmt: skip
    by_digits = {"validation_bleu": 0.0, "validation_exact_match": 90.0, "validation_exact_match_by_digits": {"1": 90}}
    numbers = write_run(tmp_path / "numbers", steps=10)
    (numbers / "metrics.jsonl").write_text("".join(
        json.dumps({**r, **by_digits} if "validation_bleu" in r else r) + "\n" for r in records
    ))  # fmt: skip
    for folder, title in ((run, "Validation BLEU (greedy)"), (numbers, "Validation exact match (greedy)")):
        assert main(["plot", str(folder), "--out", str(folder / "curves.svg")]) == 0
        assert f"<!-- {title} -->" in (folder / "curves.svg").read_text()


def test_plot_without_matplotlib_names_the_extra_whatever_the_flags(tmp_path, monkeypatch, capsys):
    import sys

    run = write_run(tmp_path / "run", steps=5)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of matplotlib now fails
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    for flags in ([], ["--out", str(tmp_path / "curves.png")]):
        assert main(["plot", str(run), *flags]) == 1
        error = capsys.readouterr().err
        assert "matplotlib" in error and "Traceback" not in error and error.count("\n") == 1
