#!/usr/bin/env bash
# Multi30k (task 1) text-only translation from English, with a Transformer-Tiny-sized model (Wu et al. 2021:
# 4+4 layers, d_model 128, h 4, d_ff 256, P_drop 0.3, label smoothing 0.1, joint BPE, beam 5; the `tiny` preset
# adds dropout 0.1 on attention weights and after the feed-forward ReLU),
# on lowercased text as is usual for Multi30k: compare by lowercased BLEU.
#
#   bash training/recipes/multi30k.sh DATA_DIR TARGET_LANG OUTPUT_DIR [--budget recipe|published|reference]
#       [--follow dropout|bpe|averaging|length-penalty ...] [extra train flags]
#
# --budget recipe (the default): 4096 tokens per update for 70 epochs (about 8,100 updates), the learning rate cooled
# down linearly to 0 over the last 2,000, the last update's weights.
# --budget published: the reference run's budget (Wu et al. 2021, fairseq on two GPUs of --max-tokens 4096 each):
# 8192 tokens per update for 8,000 updates, the inverse square root to the end (no cool-down), a checkpoint at the end
# of every epoch, and the average of the last 10 epoch checkpoints, kept only if it beats the last update's weights
# on validation.
# --budget reference: the published budget with the reference run's settings wherever this recipe differs and a flag
# can follow it: no dropout on the attention weights or after the feed-forward ReLU (the `tiny` preset's 0.1 each),
# a joint BPE of 10,000 pieces (the reference learns 10,000 merges), the average of the last 10 epoch checkpoints
# always kept (not only when it wins on validation), and length penalty 1 (no search). What it still does not
# follow: the reference learns its BPE on the official lowercased, normalised, Moses-tokenised files (`*.lc.norm.tok.*`,
# not among the datasets this recipe reads; here the tokenizer lowercases and splits punctuation off itself), it stops
# early with patience 10 on validation loss, and it scores BLEU with fairseq on that tokenised text (here sacreBLEU's
# lowercased 13a on detokenised text).
# --follow SETTING (after --budget published, once per setting): one of those four settings of the reference run
# alone: dropout (none on the attention weights or after the ReLU), bpe (10,000 pieces), averaging (the average always
# kept), length-penalty (1, no search). --budget reference is --budget published with all four.
#
# The run uses the whole machine: NPROC processes (default 2, one per core) of one thread each, data-parallel, with
# --max-tokens 4096/NPROC per process so that every update sees 4096 tokens, 8192 with --budget published (about
# 0.55 s per 4096-token update on 2 CPU cores; one process with two threads is about as fast). With DEVICE=cuda it
# trains on the GPU instead: NPROC processes (default 1), one GPU each, the same tokens per update.
#
# DATA_DIR holds train.jsonl, validation.jsonl and test_2016_flickr.jsonl in the datasets translation schema.
# The model is chosen on the validation split only: with the default budget the weights of the last update (the
# learning rate cools down to 0, and on validation they beat the average of the last 4 or 8 checkpoints), then the
# length penalty with the best validation BLEU; test_2016_flickr is decoded once, with beam 5, at the end.
set -euo pipefail
DATA=${1:?usage: multi30k.sh DATA_DIR TARGET_LANG OUTPUT_DIR [--budget B] [--follow SETTING ...] [extra train flags]}
TGT=${2:?target language: de or fr}
OUT=${3:?output folder}
shift 3
DEVICE=${DEVICE:-cpu}
case "$DEVICE" in
  cpu) NPROC=${NPROC:-2}; DEVICE_FLAGS=(--cpu); export OMP_NUM_THREADS=1 ;;
  cuda) NPROC=${NPROC:-1}; DEVICE_FLAGS=() ;;
  *) echo "multi30k.sh: DEVICE=$DEVICE: expected cpu or cuda" >&2; exit 2 ;;
esac
BUDGET=recipe
if [[ "${1:-}" == "--budget" ]]; then
  BUDGET=${2:?--budget: recipe, published or reference}
  shift 2
fi
FOLLOW=()
while [[ "${1:-}" == "--follow" ]]; do
  FOLLOW+=("${2:?--follow: dropout, bpe, averaging or length-penalty}")
  shift 2
done
case "$BUDGET" in
  recipe|published) ;;
  reference) BUDGET=published; FOLLOW+=(dropout bpe averaging length-penalty) ;;
  *) echo "multi30k.sh: --budget $BUDGET: expected recipe, published or reference" >&2; exit 2 ;;
esac
if [[ ${#FOLLOW[@]} -gt 0 && "$BUDGET" != published ]]; then
  echo "multi30k.sh: --follow needs --budget published: the reference's settings are compared at its budget" >&2
  exit 2
fi
TUNE_AVERAGING=(--tune-averaging)
LENGTH_PENALTY=(--tune-length-penalty 0.4 0.6 0.8 1.0 1.2 1.4 1.6)
SETTINGS=()
for setting in "${FOLLOW[@]}"; do
  case "$setting" in
    dropout) SETTINGS+=(--attention-dropout 0 --activation-dropout 0) ;;
    bpe) SETTINGS+=(--vocab-size 10000) ;;
    averaging) TUNE_AVERAGING=() ;;
    length-penalty) LENGTH_PENALTY=(--length-penalty 1.0) ;;
    *) echo "multi30k.sh: --follow $setting: expected dropout, bpe, averaging or length-penalty" >&2; exit 2 ;;
  esac
done
case "$BUDGET" in
  recipe) BUDGET_FLAGS=(--max-tokens $((4096 / NPROC)) --keep-checkpoints 2 "${LENGTH_PENALTY[@]}") ;;
  published) BUDGET_FLAGS=(--max-tokens $((8192 / NPROC)) --max-steps 8000 --cooldown-steps 0
    --save-strategy epoch --keep-checkpoints 10 --average-checkpoints 10 "${TUNE_AVERAGING[@]}"
    "${LENGTH_PENALTY[@]}" "${SETTINGS[@]}") ;;
esac
torchrun --standalone --nproc_per_node "$NPROC" -m vanilla_transformer.cli train "${DEVICE_FLAGS[@]}" \
  --train-file "$DATA/train.jsonl" \
  --validation-file "$DATA/validation.jsonl" \
  --test-file "$DATA/test_2016_flickr.jsonl" \
  --source-lang en --target-lang "$TGT" \
  --output-dir "$OUT" \
  --preset tiny \
  --lowercase --num-beams 5 "${BUDGET_FLAGS[@]}" "$@"
