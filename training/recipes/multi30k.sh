#!/usr/bin/env bash
# Multi30k (task 1) text-only translation from English, with a Transformer-Tiny-sized model (Wu et al. 2021:
# 4+4 layers, d_model 128, h 4, d_ff 256, P_drop 0.3, label smoothing 0.1, joint BPE, beam 5; the `tiny` preset
# adds dropout 0.1 on attention weights and after the feed-forward ReLU),
# on lowercased text as is usual for Multi30k: compare by lowercased BLEU.
#
#   bash training/recipes/multi30k.sh DATA_DIR TARGET_LANG OUTPUT_DIR [extra train flags]
#
# The run uses the whole machine: NPROC processes (default 2, one per core) of one thread each, data-parallel, with
# --max-tokens 4096/NPROC per process so that every update sees 4096 tokens (about 0.55 s per update on 2 CPU cores;
# one process with two threads is about as fast).
#
# DATA_DIR holds train.jsonl, validation.jsonl and test_2016_flickr.jsonl in the datasets translation schema.
# The model is chosen on the validation split only: the weights of the last update (the learning rate cools down to 0,
# and on validation they beat the average of the last 4 or 8 checkpoints), then the length penalty with the best
# validation BLEU; test_2016_flickr is decoded once, with beam 5, at the end.
set -euo pipefail
DATA=${1:?usage: multi30k.sh DATA_DIR TARGET_LANG OUTPUT_DIR [extra train flags]}
TGT=${2:?target language: de or fr}
OUT=${3:?output folder}
shift 3
NPROC=${NPROC:-2}
export OMP_NUM_THREADS=1
torchrun --standalone --nproc_per_node "$NPROC" -m vanilla_transformer.cli train --cpu \
  --train-file "$DATA/train.jsonl" \
  --validation-file "$DATA/validation.jsonl" \
  --test-file "$DATA/test_2016_flickr.jsonl" \
  --source-lang en --target-lang "$TGT" \
  --output-dir "$OUT" \
  --preset tiny --max-tokens $((4096 / NPROC)) \
  --lowercase --num-beams 5 --keep-checkpoints 2 --tune-length-penalty 0.4 0.6 0.8 1.0 1.2 1.4 1.6 \
  "$@"
