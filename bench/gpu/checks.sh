#!/usr/bin/env bash
# Every GPU check in one command, for a CUDA machine that has torch, transformers and accelerate but may lack the
# rest and may have no network: the `gpu`-marked tests, then `python -m bench gpu`.
#
#   bash bench/gpu/checks.sh OUT [python -m bench gpu flags...]
#
# Wheels in .whl/ (or $WHEELS: packages the machine lacks, e.g. datasets and its pyarrow, or a setuptools recent
# enough for pyproject.toml) are installed first, into a folder put on PYTHONPATH; the project, unless it imports
# already, is installed editable without build isolation or an index. $PYTHON names the interpreter (default python3).
# OUT receives the machine's description (machine.txt), each step's log, the GPU suite's raw results (gpu.json) and a
# copy of BENCHMARKS.md with the GPU section written in. The benchmark runs first, alone on the GPU, so that nothing
# else started beside the tests can disturb its timings; then the tests. Both steps run even if the first fails; the
# exit status is non-zero if either failed. BENCH_TIMEOUT and TESTS_TIMEOUT (seconds) bound each step: by default 300
# and 210, so that the whole script fits in one 10-minute command on a machine lent for a few minutes; an empty
# value leaves the step unbounded. A step stopped there logs what it measured so far and counts as failed (the
# benchmark measures what the GPU training issue decides on first, bench/gpu/suite.py's `run`). TEST_TIMEOUT
# (default 120) stops one test that runs longer, named, and the tier goes on. Only the test modules that hold
# `gpu`-marked tests are collected: the others import packages (a browser driver, gradio) such a machine may lack.
set -uo pipefail
out=${1:?usage: bash bench/gpu/checks.sh OUT [python -m bench gpu flags...]}
shift
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python=${PYTHON:-python3}

wheels=${WHEELS:-.whl}
if compgen -G "$wheels/*.whl" > /dev/null; then
    site=$(mktemp -d)
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl || exit 1
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$python" -c "import vanilla_transformer" 2> /dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
fi

{
    nvidia-smi 2>&1 || echo "nvidia-smi: not available"
    "$python" - <<'EOF'
import platform, accelerate, torch, transformers
cuda = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
print(f"{cuda}; torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
      f"accelerate {accelerate.__version__}, Python {platform.python_version()}")
EOF
} > "$out/machine.txt"
tail -n 1 "$out/machine.txt"

# timeout's SIGINT lets pytest print its summary of the tests that ran
bounded() { local seconds=$1; shift; if [ -n "$seconds" ]; then timeout -s INT -k 20 "$seconds" "$@"; else "$@"; fi; }

cp BENCHMARKS.md "$out/BENCHMARKS.md"
bounded "${BENCH_TIMEOUT-300}" "$python" -m bench gpu --out "$out/BENCHMARKS.md" --json "$out/gpu.json" "$@" 2>&1 |
    tee "$out/gpu-bench.log"
bench=$?

# every `gpu`-marked test, each named with its result as it ends (-v), each stopped after TEST_TIMEOUT seconds
mapfile -t modules < <(grep -rlE --include='test_*.py' '^\s*@pytest\.mark\.gpu\b' tests | sort)
if [ "${#modules[@]}" -eq 0 ]; then
    echo "no test module under tests/ holds gpu-marked tests" | tee "$out/gpu-tests.log"
    tests=1
else
    TEST_TIMEOUT=${TEST_TIMEOUT:-120} bounded "${TESTS_TIMEOUT-210}" "$python" -m pytest -v -m gpu \
        -p no:cacheprovider --durations=0 --continue-on-collection-errors "${modules[@]}" 2>&1 |
        tee "$out/gpu-tests.log"
    tests=$?
fi

echo "gpu-marked tests: exit status $tests; python -m bench gpu: exit status $bench"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
