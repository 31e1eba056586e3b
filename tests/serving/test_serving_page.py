"""docs/serving.md, run: the server started as the page starts it (on a free port instead of 5000), on the README's
first model as committed to the repository, and every `sh` example of the page that shows an output run against it
and compared."""

import re
import subprocess

from ..documents import EXAMPLE_MODEL, FENCE, PAGES, ROOT, same_output
from .conftest import serving

PAGE = PAGES["serving.md"]


def server_examples() -> list[tuple[str, str]]:
    """(command, shown output) of every sh block that a text block directly follows."""
    blocks = list(FENCE.finditer(PAGE))
    return [
        (code.group(2), output.group(2))
        for code, output in zip(blocks, blocks[1:])
        if code.group(1) == "sh" and output.group(1) == "text" and not PAGE[code.end() : output.start()].strip()
    ]


def test_the_page_starts_the_server_on_the_committed_first_model():
    assert f"vanilla-transformer serve {EXAMPLE_MODEL.relative_to(ROOT)}\n" in PAGE
    assert len(server_examples()) >= 3


def test_every_example_against_the_server_prints_what_the_page_shows(tmp_path):
    with serving(EXAMPLE_MODEL, tmp_path=tmp_path) as server:
        port = server.url.rsplit(":", 1)[1]
        for command, expected in server_examples():
            command = re.sub(r"127\.0\.0\.1:5000", f"127.0.0.1:{port}", command)
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            assert same_output(done.stdout, expected), f"{command}\nprinted: {done.stdout}\nshown: {expected}"
