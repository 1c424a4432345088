#!/usr/bin/env bash
# What splitting `rsmooth audit` into shards gives: the same certified images audited by one
# process on one core, then by two --shard jobs (one per core) joined by `rsmooth merge`; prints
# both wall times, their ratio, and whether the merged rows equal the one-process rows (the time
# column aside).  Usage: bash bench/audit_shards.sh MODEL CERTIFY_TSV OUT [MAX]
#   MODEL: the checkpoint CERTIFY_TSV was made with; MAX: certified images to audit (default 24)
set -euo pipefail
model=$1 cert=$2 out=$3 max=${4:-24}
common=(--checkpoint "$model" --certify "$cert" --max "$max" --heartbeat 0 --overwrite)
export OMP_NUM_THREADS=1
grep -q avx512_bf16 /proc/cpuinfo && echo "cpu: avx512_bf16" || echo "cpu: no avx512_bf16"
s=$SECONDS
taskset -c 0 python -m rsmooth audit "${common[@]}" --out "$out/one" | tail -n 2
one=$((SECONDS - s)) s=$SECONDS
for i in 0 1; do taskset -c "$i" python -m rsmooth audit "${common[@]}" --out "$out/two" --shard "$i/2" >/dev/null & done
wait
python -m rsmooth merge "$out/two" | tail -n 2
two=$((SECONDS - s))
if cmp -s <(cut -f1-9 "$out/one/audit.tsv") <(cut -f1-9 "$out/two/audit.tsv"); then echo "rows: identical (time aside)"
else echo "rows: DIFFER"; fi
echo "one process: $one s; 2 shards + merge: $two s; ratio $(python -c "print(round($one / $two, 2))")"
