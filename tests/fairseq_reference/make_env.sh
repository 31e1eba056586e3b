#!/usr/bin/env bash
# Builds .venv-fairseq at the repository root: fairseq (fairseq-fixed 0.12.3.1, which needs numpy < 2) in a virtual
# environment of its own that reuses the torch installed here, for tests/test_fairseq_reference.py. fairseq-fixed and
# fastBPE are built from their source distributions against that torch, without build isolation, so their build tools
# are installed first (wheel for bdist_wheel; scikit-learn, which fairseq imports).
#
# Its own packages, and the pure-Python ones that torch imports, are installed into it whatever this environment has
# (`--ignore-installed`); torch only where this environment lacks torch 2.13.0 (read from its metadata alone). So
# .ci/run builds it while it installs the project's other packages here: neither pip reads what the other writes, and
# fairseq's build, which imports torch, finds none of the packages that pip may be replacing meanwhile.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(python -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null)" != 2.13.0 ]; then
  pip install torch==2.13.0
fi
python -m venv --system-site-packages .venv-fairseq
.venv-fairseq/bin/pip install --ignore-installed "numpy<2" "cython<3.1" wheel setuptools hydra-core==1.3.2 \
  omegaconf==2.3.0 bitarray sacrebleu subword-nmt sacremoses scikit-learn regex tqdm cffi \
  filelock typing-extensions sympy networkx jinja2 fsspec  # the last six: what torch imports
.venv-fairseq/bin/pip install --no-build-isolation fastBPE
# fairseq's own C and Cython extensions are built (BLEU, batching); its three torch C++ extensions are left out: BASE
# layers' balanced assignment, the non-autoregressive models' edit distance and simultaneous translation's alignment.
# None is used by a Transformer, fairseq imports each only where it is used, and compiling them against torch's
# headers took about three of the build's four minutes of a core.
sources=$(mktemp -d)
.venv-fairseq/bin/pip download --no-deps --no-binary :all: --no-build-isolation -d "$sources" fairseq-fixed==0.12.3.1
tar xzf "$sources"/fairseq_fixed-0.12.3.1.tar.gz -C "$sources"
.venv-fairseq/bin/python - "$sources/fairseq_fixed-0.12.3.1/setup.py" <<'PY'
import sys

path = sys.argv[1]
text = open(path, encoding="utf-8").read()
start, end = text.index("extensions.extend("), text.index('if "CUDA_HOME" in os.environ')
assert all(name in text[start:end] for name in ("fairseq.libbase", "fairseq.libnat", "alignment_train_cpu_binding"))
open(path, "w", encoding="utf-8").write(text[:start] + text[end:])
PY
.venv-fairseq/bin/pip install --no-build-isolation --no-deps "$sources/fairseq_fixed-0.12.3.1"
rm -rf "$sources"
