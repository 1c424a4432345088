#!/usr/bin/env bash
# Issue 40's measurement: certified beside empirical accuracy on 500 Fashion-MNIST test images
# (every 20th), the audit's count, and the wall time of each step, for one sigma 0.25 LeNet.
# Every step continues its own file when rerun (rsmooth's resume), so the same command picks up
# where a stopped session left it.  Usage: bash bench/attack_fmnist.sh MODEL OUT [N]
#   MODEL: a run folder or checkpoint (e.g. rsmooth train --preset fashion-mnist/gaussian/0.25)
#   N: certify's and PREDICT's samples (default 10000; the papers' 100000 costs 10x)
set -euo pipefail
model=$1 out=$2 n=${3:-10000}
mkdir -p "$out"
sub=(--skip 20 --max 500)
t() { local s=$SECONDS; "$@"; echo "$(date -u +%FT%TZ) $((SECONDS - s)) s: ${*:1:3}" >> "$out/times.log"; }
t python -m rsmooth certify --checkpoint "$model" --n "$n" "${sub[@]}" --out "$out/certify.tsv" --heartbeat 300
t python -m rsmooth attack --checkpoint "$model" --n "$n" "${sub[@]}" --eps 0.25 0.5 0.75 1.0 \
  --out "$out/attack.tsv" --heartbeat 300
t python -m rsmooth audit --checkpoint "$model" --certify "$out/certify.tsv" --out "$out/audit" --heartbeat 300
python -m rsmooth analyze "$out/certify.tsv" --attack "$out/attack.tsv" --plot "$out/certified-vs-empirical.png" \
  > "$out/table.md"
cat "$out/table.md" "$out/times.log"
