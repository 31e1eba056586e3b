"""The resumable output: the part cut back to its journal, a changed run refused by name, the parts joined in input
order, and an output that cannot be written is named before anything is translated."""

import json
import os
import re

import pytest

from vanilla_transformer.corpus.jobs import Done
from vanilla_transformer.corpus.output import Parts, Share, check_output_file
from vanilla_transformer.errors import OutputError

INPUTS = [{"input": "--input in.txt", "bytes": 10, "first_window_sha256": "ab"}]
SETTINGS = {"num_beams": 5}


def done(text: str, skipped: int = 0) -> Done:
    return Done(text, text.count("\n"), 0, skipped)


def test_a_part_written_past_its_journal_is_cut_back_and_goes_on(tmp_path):
    output = tmp_path / "out.txt"
    parts = Parts(str(output), Share(), INPUTS, SETTINGS)
    parts.write(0, done("eins\nzwei\n"))
    with open(parts.text, "ab") as handle:  # killed while it wrote the next window: half a line, not recorded
        handle.write(b"dr")
    parts.release()  # as the process's end lets its lock go
    resumed = Parts(str(output), Share(), INPUTS, SETTINGS)
    assert resumed.resumed_windows == 1 and resumed.done(0) and not resumed.done(1)
    resumed.write(1, done("drei\n", skipped=1))
    assert resumed.finish() == 1
    assert output.read_text() == "eins\nzwei\ndrei\n" and not os.path.exists(f"{output}.partial")


def test_a_second_run_into_the_same_output_is_refused_while_the_first_writes(tmp_path):
    output = tmp_path / "out.txt"
    first = Parts(str(output), Share(), INPUTS, SETTINGS)
    first.write(0, done("eins\n"))
    with pytest.raises(OutputError, match=r"--output .*out.txt: another run is writing it \(.*out.txt.partial is in "
                                          r"use\); wait for it to end, or give another --output"):  # fmt: skip
        Parts(str(output), Share(), INPUTS, SETTINGS)
    first.write(1, done("zwei\n"))  # its part, journal and lock as they were
    assert first.finish() == 0 and output.read_text() == "eins\nzwei\n"
    assert not os.path.exists(f"{output}.partial")
    second = Parts(str(output), Share(), INPUTS, SETTINGS)  # once it ended, a new run starts
    second.abandon()
    assert not os.path.exists(f"{output}.partial")


def test_a_run_started_differently_is_refused_naming_what_changed(tmp_path):
    output = str(tmp_path / "out.txt")
    Parts(output, Share(), INPUTS, SETTINGS).write(0, done("eins\n"))
    edited = [{**INPUTS[0], "bytes": 11}]
    with pytest.raises(OutputError, match=r"--input in.txt changed since the run started .* num_beams was 5 at the "
                                          r"first start, now 4.* remove .*out.txt.partial to start over"):  # fmt: skip
        Parts(output, Share(), edited, {"num_beams": 4})
    with pytest.raises(OutputError, match="it started on 1 processes, now 2"):
        Parts(output, Share(0, 2), INPUTS, SETTINGS)
    assert Parts(output, Share(), INPUTS, SETTINGS).resumed_windows == 1  # the same command goes on


def test_the_processes_parts_are_joined_in_input_order(tmp_path):
    output = tmp_path / "out.txt"
    first, second = (Parts(str(output), Share(rank, 2), INPUTS, SETTINGS) for rank in (0, 1))
    for window, text in enumerate(["a\n", "b\nb\n", "c\n", "d\n", "e\n"]):
        (first if window % 2 == 0 else second).write(window, done(text))
    for parts in (first, second):
        parts.finished = True
        parts.record()
    first.join()
    assert output.read_text() == "a\nb\nb\nc\nd\ne\n"


def test_a_join_before_every_process_finished_is_refused(tmp_path):
    output = tmp_path / "out.txt"
    first, second = (Parts(str(output), Share(rank, 2), INPUTS, SETTINGS) for rank in (0, 1))
    first.finished = True
    first.record()
    with pytest.raises(OutputError, match="has not finished"):
        first.join()
    assert json.loads(open(second.journal).read())["finished"] is False and not output.exists()


def test_an_output_in_a_missing_folder_or_on_a_folder_is_named(tmp_path):
    with pytest.raises(OutputError, match=r"--output .*nowhere/out.txt: its folder .*nowhere does not exist"):
        Parts(str(tmp_path / "nowhere" / "out.txt"), Share(), INPUTS, SETTINGS)
    with pytest.raises(OutputError, match="is a folder; expected a file name"):
        Parts(str(tmp_path), Share(), INPUTS, SETTINGS)
    (tmp_path / "out.txt.partial").write_text("a file where the parts' folder goes")
    with pytest.raises(OutputError, match=r"--output .*out.txt: .*out.txt.partial: File exists"):
        Parts(str(tmp_path / "out.txt"), Share(), INPUTS, SETTINGS)


def test_a_journal_this_package_did_not_write_is_named(tmp_path):
    output = tmp_path / "out.txt"
    (tmp_path / "out.txt.partial").mkdir()
    for text in ("{not json", '{"run": 1, "lengths": 2, "skipped": 0, "finished": false}'):  # JSON of other kinds
        (tmp_path / "out.txt.partial" / "process-0.json").write_text(text)
        with pytest.raises(OutputError, match=r"process-0.json is not a journal this package wrote; remove .* to st"):
            Parts(str(output), Share(), INPUTS, SETTINGS)


def test_a_run_resumes_whatever_spelling_of_its_input_files_path(tmp_path):
    output = str(tmp_path / "out.txt")
    Parts(output, Share(), INPUTS, SETTINGS).write(0, done("eins\n"))
    elsewhere = [{**INPUTS[0], "input": f"--input {tmp_path / 'in.txt'}"}]  # the same file, from another folder
    assert Parts(output, Share(), elsewhere, SETTINGS).resumed_windows == 1


def test_a_start_that_wrote_nothing_is_started_afresh_and_the_join_keeps_other_files(tmp_path):
    output = tmp_path / "out.txt"
    Parts(str(output), Share(), INPUTS, SETTINGS)  # stopped before its first window
    (tmp_path / "out.txt.partial" / "notes.txt").write_text("mine")
    parts = Parts(str(output), Share(), INPUTS, {"num_beams": 4})  # another command: nothing to resume, no refusal
    parts.write(0, done("eins\n"))
    parts.finish()
    assert output.read_text() == "eins\n" and (tmp_path / "out.txt.partial" / "notes.txt").read_text() == "mine"


def test_an_output_that_is_a_link_a_device_or_no_name_is_refused_not_replaced(tmp_path):
    (tmp_path / "real.txt").write_text("kept")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    refused = {
        str(tmp_path / "link.txt"): f"is a symbolic link; give the file it points to, {tmp_path / 'real.txt'}",
        os.devnull: "is not a regular file (a device or a pipe), which would be replaced",
        "": "--output: an empty name; expected a file name",
    }
    for output, words in refused.items():
        with pytest.raises(OutputError, match=re.escape(words)):
            Parts(output, Share(), INPUTS, SETTINGS)
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "real.txt").read_text() == "kept"
    assert os.path.exists(os.devnull) and not os.path.isfile(os.devnull) and not os.path.exists(".partial")


def test_an_output_in_a_folder_the_system_keeps_is_refused_before_any_work(tmp_path):
    """access() says /proc and /sys are writable to root: an evaluation ran to its end, then could not write."""
    for path in ("/proc/results.json", "/sys/results.json"):
        with pytest.raises(OutputError, match=f"^--output {path}: not writable"):
            check_output_file("--output", path)
    check_output_file("--output", str(tmp_path / "results.json"))
    assert os.listdir(tmp_path) == []  # the file it tried is gone
