"""Files and folders written so that a failure leaves nothing half-written and no file of the user's is lost."""

import json
import os
import shutil

import pytest
from vanilla_transformer.training.run.state import forget_metrics_after

from vanilla_transformer.errors import WriteError
from vanilla_transformer.folders import replacing, staged_folder, write_atomically


def umask_now() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_a_file_written_whole_keeps_the_users_files_beside_it_and_gets_the_usual_mode(tmp_path, mask):
    (tmp_path / "results.json.tmp").write_text("my notes")
    before = os.umask(mask)
    try:
        write_atomically(str(tmp_path / "results.json"), "{}")
        assert umask_now() == mask  # the umask is only read, never changed on the way
    finally:
        os.umask(before)
    assert (tmp_path / "results.json").read_text() == "{}" and (tmp_path / "results.json.tmp").read_text() == "my notes"
    assert (tmp_path / "results.json").stat().st_mode & 0o777 == 0o666 & ~mask
    assert sorted(os.listdir(tmp_path)) == ["results.json", "results.json.tmp"]


def test_a_block_that_fails_leaves_the_old_file_and_nothing_beside_it(tmp_path):
    path = tmp_path / "table.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="cut short"), replacing(str(path), binary=True) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("cut short")
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["table.bin"]
    with replacing(str(path), binary=True) as handle:
        handle.write(b"\x00new")
    assert path.read_bytes() == b"\x00new" and os.listdir(tmp_path) == ["table.bin"]


def test_a_resumed_runs_metrics_are_rewritten_whole_and_keep_a_file_named_like_a_temporary(tmp_path):
    records = [{"step": s, "loss": 1.0} for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 4, "lo')
    (tmp_path / "metrics.jsonl.tmp").write_text("my notes")
    forget_metrics_after(str(tmp_path), 2)
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (tmp_path / "metrics.jsonl.tmp").read_text() == "my notes"
    assert sorted(os.listdir(tmp_path)) == ["metrics.jsonl", "metrics.jsonl.tmp"]


def test_a_staged_folder_replaces_the_old_whole_and_an_old_one_moved_aside_stays_until_replaced(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "old.txt").write_text("old")
    aside = tmp_path / ".model.staging-0123456789ab.replaced"  # a replace killed after moving the old aside
    stale = tmp_path / ".model.staging-ba9876543210"  # a killed write's
    for folder in (aside, stale):
        folder.mkdir()
    with staged_folder(str(out)) as staging:
        with open(os.path.join(staging, "new.txt"), "w") as handle:
            handle.write("new")
    assert os.listdir(out) == ["new.txt"] and os.listdir(tmp_path) == ["model"]
    shutil.rmtree(out)
    aside.mkdir()  # the only copy of the old folder, while no new one has replaced it
    with pytest.raises(WriteError, match=f"^{out}: could not be written: .*No such file"):
        with staged_folder(str(out)) as staging:
            open(os.path.join(staging, "no-such-folder", "new.txt"), "w")
    assert os.listdir(tmp_path) == [aside.name]


def test_a_staged_folder_that_cannot_take_its_place_puts_the_old_one_back(tmp_path, monkeypatch):
    out = tmp_path / "model"
    out.mkdir()
    (out / "old.txt").write_text("old")
    rename = os.replace

    def failing(source, target):  # the new folder's rename fails, after the old one was moved aside
        if ".staging-" in str(source) and not str(source).endswith(".replaced"):
            raise OSError(18, "Invalid cross-device link")
        rename(source, target)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(WriteError, match=f"^{out}: could not be written: .*cross-device"):
        with staged_folder(str(out)) as staging:
            with open(os.path.join(staging, "new.txt"), "w") as handle:
                handle.write("new")
    assert os.listdir(out) == ["old.txt"] and os.listdir(tmp_path) == ["model"]
