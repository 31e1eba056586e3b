#!/usr/bin/env bash
# The wheels a lent GPU machine lacks, downloaded here, where a package index is reachable, for that machine, which
# has none: its image holds torch, transformers, accelerate, safetensors, tokenizers, sacrebleu, pyarrow, httpx and
# pytest, but not the packages below. bench/gpu/checks.sh installs what it finds in the folder (.whl/ by default).
#
#   bash bench/gpu/wheels.sh SET [DIR]
#
# SET checks: every package the gpu-marked tests and `python -m bench gpu` import (datasets, the server's, the
#             LibreTranslate client, CTranslate2: about 46 MB, most of it CTranslate2's).
# SET training: what `vanilla-transformer train` and `evaluate` import (datasets, pysbd: about 1 MB), for the
#             Multi30k runs (training/recipes/multi30k_gpu_sets.sh), whose data travels beside them.
#
# Each package at the version installed in this environment ($PYTHON, default python3), the one the tests passed
# with here; built for the lent machine's Python (PYTHON_VERSION, default 3.12) on x86-64 Linux. DIR (default .whl)
# is emptied of earlier wheels first: two versions of one package stop the install there. DRY_RUN=1 prints the pip
# command instead of running it.
set -euo pipefail
set_name=${1:?usage: bash bench/gpu/wheels.sh checks|training [DIR]}
dir=${2:-.whl}
python=${PYTHON:-python3}
training=(datasets dill multiprocess pysbd)
serving=(fastapi starlette pydantic pydantic_core annotated-types typing-inspection uvicorn httptools python-multipart)
case "$set_name" in
    training) packages=("${training[@]}") ;;
    checks) packages=("${training[@]}" "${serving[@]}" libretranslatepy ctranslate2) ;;
    *) echo "wheels.sh: SET $set_name: expected checks or training" >&2; exit 2 ;;
esac

# NAME==VERSION of each, as installed here; a package missing here is named and stops the script
found=$("$python" - "${packages[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

missing = []
for name in sys.argv[1:]:
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        missing.append(name)
if missing:
    sys.exit(f"wheels.sh: not installed here, so no version to fetch: {', '.join(missing)}")
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
