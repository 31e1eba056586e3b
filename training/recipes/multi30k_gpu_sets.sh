#!/usr/bin/env bash
# The Multi30k runs of a lent GPU, six at once on one card, each with multi30k.sh (DEVICE=cuda, one process):
#
#   bash training/recipes/multi30k_gpu_sets.sh SET DATA_DIR OUT
#
# SET 1: En->Fr, --budget reference and --budget published, seeds 42, 1 and 2.
# SET 2: En->De, --budget published with --follow dropout, and with --follow bpe, seeds 42, 1 and 2.
# SET 3: En->De, --budget published with --follow averaging, and with --follow length-penalty, seeds 42, 1 and 2.
#
# Each run writes its model folder OUT/NAME and its log OUT/NAME.log, with --eval-steps 2000 (greedy validation less
# often; the training itself is the same). A run whose folder holds eval_results.json is done and skipped; one with
# checkpoints resumes from its last (--resume-from). Then every finished model is scored on the held-out sets found in
# DATA_DIR (test_2017_flickr.jsonl, test_2017_mscoco.jsonl) with beam 5 and the length penalty its run chose, into
# OUT/NAME/held_out_test_2017_*.json. DRY_RUN=1 prints the commands instead of running them.
#
# RECORD=FILE.tar.gz: at the end, what the record of the runs needs, in one archive (a lent machine sends back a few
# files only, and not the model folders): each run's log, eval_results.json, card (README.md) and held-out scores.
set -euo pipefail
SET=${1:?usage: multi30k_gpu_sets.sh SET DATA_DIR OUT}
DATA=${2:?usage: multi30k_gpu_sets.sh SET DATA_DIR OUT}
OUT=${3:?usage: multi30k_gpu_sets.sh SET DATA_DIR OUT}
HERE=$(cd "$(dirname "$0")" && pwd)
case "$SET" in
  1) TGT=fr; SETTINGS=("reference:--budget reference" "published:--budget published") ;;
  2) TGT=de; SETTINGS=("dropout:--budget published --follow dropout" "bpe:--budget published --follow bpe") ;;
  3) TGT=de; SETTINGS=("averaging:--budget published --follow averaging"
       "length-penalty:--budget published --follow length-penalty") ;;
  *) echo "multi30k_gpu_sets.sh: SET $SET: expected 1, 2 or 3" >&2; exit 2 ;;
esac
run() { if [[ -n "${DRY_RUN:-}" ]]; then echo "$*"; else "$@"; fi; }
length_penalty() {  # the one the run chose, from its eval_results.json
  "${PYTHON:-python3}" -c 'import json, sys; print(json.load(open(sys.argv[1]))["length_penalty"])' "$1"
}
mkdir -p "$OUT"
NAMES=()
for setting in "${SETTINGS[@]}"; do
  for seed in 42 1 2; do
    name="en_${TGT}_gpu_${setting%%:*}_seed${seed}"
    NAMES+=("$name")
    [[ -f "$OUT/$name/eval_results.json" ]] && continue
    read -r -a flags <<< "${setting#*:}"
    resume=()
    if compgen -G "$OUT/$name/checkpoints/checkpoint-*" > /dev/null; then resume=(--resume-from "$OUT/$name"); fi
    command=(env DEVICE=cuda bash "$HERE/multi30k.sh" "$DATA" "$TGT" "$OUT/$name" "${flags[@]}" --seed "$seed"
      --eval-steps 2000 "${resume[@]}")
    if [[ -n "${DRY_RUN:-}" ]]; then echo "${command[*]}"; else "${command[@]}" > "$OUT/$name.log" 2>&1 & fi
  done
done
status=0
wait || status=$?
for name in "${NAMES[@]}"; do
  results="$OUT/$name/eval_results.json"
  if [[ ! -f "$results" && -z "${DRY_RUN:-}" ]]; then
    echo "$name: no eval_results.json (see $OUT/$name.log)" >&2
    status=1
    continue
  fi
  penalty=CHOSEN  # a dry run's: the run has not chosen it yet
  if [[ -f "$results" ]]; then penalty=$(length_penalty "$results"); fi
  for split in test_2017_flickr test_2017_mscoco; do
    [[ -f "$DATA/$split.jsonl" ]] || continue
    run "${PYTHON:-python3}" -m vanilla_transformer evaluate --model "$OUT/$name" --test-file "$DATA/$split.jsonl" \
      --source-lang en --target-lang "$TGT" --num-beams 5 --length-penalty "$penalty" --device cuda \
      --output "$OUT/$name/held_out_$split.json" || status=1
  done
done
if [[ -n "${RECORD:-}" ]]; then
  records=()
  for name in "${NAMES[@]}"; do
    for file in "$name.log" "$name/eval_results.json" "$name/README.md" "$name"/held_out_*.json; do
      [[ -f "$OUT/$file" ]] && records+=("$file")
    done
  done
  if (( ${#records[@]} )); then run tar -czf "$RECORD" -C "$OUT" "${records[@]}"; fi
fi
exit "$status"
