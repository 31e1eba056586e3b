"""bench/gpu/wheels.sh, which fetches the wheels a lent GPU machine lacks: each package of a set at the version
installed here, for the lent machine's Python, and a set it does not know refused (its pip command, not a
download: the tests run without an index)."""

import os
import re
import subprocess
import sys
from importlib.metadata import version

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def wheels(*args, **env):
    environment = {**os.environ, "PYTHON": sys.executable, "DRY_RUN": "1", **env}
    return subprocess.run(
        ["bash", "bench/gpu/wheels.sh", *args], cwd=ROOT, capture_output=True, text=True, env=environment
    )


def pins(done) -> dict:
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    return dict(word.split("==") for word in words if "==" in word)


@pytest.mark.parametrize("set_name", ["training", "checks"])
def test_each_package_is_fetched_at_the_version_installed_here_for_the_lent_machines_python(set_name):
    done = wheels(set_name, "some-folder", PYTHON_VERSION="3.12")
    assert " -d some-folder " in done.stdout and "--python-version 3.12" in done.stdout
    assert "--no-deps" in done.stdout and "--only-binary=:all:" in done.stdout
    fetched = pins(done)
    assert fetched and all(fetched[name] == version(name) for name in fetched)
    assert {"datasets", "pysbd"} <= set(fetched)


def test_everything_a_fetched_package_requires_is_fetched_or_on_the_machines_image():
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    script = open(os.path.join(ROOT, "bench", "gpu", "wheels.sh")).read()
    image = {canonicalize_name(name) for name in re.search(r'IMAGE="([^"]*)"', script).group(1).split()}
    fetched = {canonicalize_name(name) for name in pins(wheels("checks"))}
    for name in fetched:
        for text in requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"python_version": "3.12", "extra": ""}):
                assert canonicalize_name(requirement.name) in fetched | image, f"{name} requires {text}"
    assert {"opentelemetry-api", "annotated-doc", "typing-extensions"} <= fetched  # fastapi's, pydantic's
    assert not fetched & image


def test_the_training_set_is_part_of_the_checks_set():
    training, checks = pins(wheels("training")), pins(wheels("checks"))
    assert training.items() < checks.items() and {"fastapi", "uvicorn", "ctranslate2"} <= set(checks)


def test_an_unknown_set_is_refused_by_name():
    done = wheels("everything")
    assert done.returncode == 2 and "SET everything: expected checks or training" in done.stderr
