#!/usr/bin/env bash
# Builds .venv-fairseq at the repository root: fairseq (fairseq-fixed 0.12.3.1, which needs numpy < 2) in a virtual
# environment of its own that reuses the torch installed here, for tests/test_fairseq_reference.py. fairseq-fixed and
# fastBPE are built from their source distributions against that torch, without build isolation, so their build tools
# are installed first (wheel for bdist_wheel; scikit-learn, which fairseq imports).
set -euo pipefail
cd "$(dirname "$0")/../.."
pip install torch==2.13.0
python -m venv --system-site-packages .venv-fairseq
.venv-fairseq/bin/pip install "numpy<2" "cython<3.1" wheel setuptools hydra-core==1.3.2 omegaconf==2.3.0 bitarray \
  sacrebleu subword-nmt sacremoses scikit-learn regex tqdm cffi
.venv-fairseq/bin/pip install --no-build-isolation fastBPE
.venv-fairseq/bin/pip install --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
