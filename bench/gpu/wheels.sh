#!/usr/bin/env bash
# The wheels a lent GPU machine lacks, downloaded here, where a package index is reachable, for that machine, which
# has none. bench/gpu/checks.sh installs what it finds in the folder (.whl/ by default).
#
#   bash bench/gpu/wheels.sh SET [DIR]
#
# SET checks: every package the gpu-marked tests and `python -m bench gpu` import (datasets, the server's, the
#             LibreTranslate client, CTranslate2: about 46 MB, most of it CTranslate2's).
# SET training: what `vanilla-transformer train` and `evaluate` import (datasets, pysbd: about 1 MB), for the
#             Multi30k runs (training/recipes/multi30k_gpu_sets.sh), whose data travels beside them.
#
# Each package of the set and everything it requires, at the version installed in this environment ($PYTHON,
# default python3), the one the tests passed with here, except what the machine's image holds (IMAGE below: torch
# and the libraries around it, several of them too large to carry); built for the lent machine's Python
# (PYTHON_VERSION, default 3.12) on x86-64 Linux. DIR is emptied of earlier wheels first: two versions of one package
# stop the install there. DRY_RUN=1 prints the pip command instead of running it.
set -euo pipefail
set_name=${1:?usage: bash bench/gpu/wheels.sh checks|training [DIR]}
dir=${2:-.whl}
python=${PYTHON:-python3}
IMAGE="torch transformers accelerate safetensors tokenizers huggingface-hub numpy pandas pyarrow fsspec filelock
packaging pyyaml tqdm requests httpx anyio click h11 xxhash jinja2 markupsafe sacrebleu pytest"
case "$set_name" in
    training) packages=(datasets pysbd) ;;
    checks) packages=(datasets pysbd fastapi uvicorn httptools python-multipart libretranslatepy ctranslate2) ;;
    *) echo "wheels.sh: SET $set_name: expected checks or training" >&2; exit 2 ;;
esac

# NAME==VERSION of each package and of what it requires, as installed here; one missing here stops the script
found=$("$python" - "$IMAGE" "${PYTHON_VERSION:-3.12}" "${packages[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, requires, version

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

image = {canonicalize_name(name) for name in sys.argv[1].split()}
target = {"python_version": sys.argv[2], "python_full_version": f"{sys.argv[2]}.0", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
pins, missing, todo = {}, [], list(sys.argv[3:])
while todo:
    name = canonicalize_name(todo.pop(0))
    if name in pins or name in image or name in missing:
        continue
    try:
        pins[name] = version(name)
    except PackageNotFoundError:
        missing.append(name)
        continue
    for text in requires(name) or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate(target):
            todo.append(requirement.name)
if missing:
    sys.exit(f"wheels.sh: not installed here, so no version to fetch: {', '.join(missing)}")
print("\n".join(f"{name}=={pins[name]}" for name in sorted(pins)))
EOF
)
mapfile -t pins <<< "$found"

platforms=()
for platform in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
    platforms+=(--platform "${platform}_x86_64")
done
command=("$python" -m pip download -q --no-deps --only-binary=:all: --implementation cp
    --python-version "${PYTHON_VERSION:-3.12}" "${platforms[@]}" -d "$dir" "${pins[@]}")
if [[ -n "${DRY_RUN:-}" ]]; then
    echo "${command[*]}"
    exit 0
fi
mkdir -p "$dir"
rm -f "$dir"/*.whl
"${command[@]}"
du -sh "$dir"
