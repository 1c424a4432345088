#!/usr/bin/env bash
# One lent-GPU session for issue 26 (Fashion-MNIST, CAT-RS Table 4), as one prepared call:
#   1. a CUDA smoke certification, then tests/test_gpu_ready.py on the GPU (sync debug mode);
#   2. CERTIFY (n0 100, n 100,000, alpha 0.001) of the two Gaussian rows' models on all 10,000
#      test images -- the paper's full protocol -- each until its deadline (rows are written as
#      they finish, so a cut run is a valid prefix and continues with the same command);
#   3. SmoothAdv sigma 0.5 training (the paper's preset) until the last deadline: its epochs/s on
#      the GPU size a full row, and its checkpoint resumes with `rsmooth train --resume`.
# Usage (on the GPU machine, repository root): bash bench/gpu_table4.sh CARRY OUTDIR
#   CARRY holds data/fashion-mnist/*.gz and g025/, g050/ (checkpoint.pt + config.json), and
#   cont/ with full_*.tsv(.json) of an earlier call to continue, and sadv050/ with the
#   checkpoint.pt and config.json an earlier call gave back (sadv050_*) to resume (both optional);
#   env: N (default 100000), MAX (default: all), DEVICE (default cuda), SMOKE (default 1), and the
#   deadlines in seconds from the start: T_050 (270), T_TESTS (300), T_025 (420), T_SADV (470).
set -u
CARRY=${1:?carry folder}; OUTDIR=${2:?output folder}
N=${N:-100000}; DEVICE=${DEVICE:-cuda}
MAXARG=(); [ -n "${MAX:-}" ] && MAXARG=(--max "$MAX")
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 RSMOOTH_HEARTBEAT=15
PY=${PY:-python3}
WORK=$(mktemp -d)
LOG=$OUTDIR/log.txt
[ -d "$CARRY/cont" ] && cp "$CARRY"/cont/full_* "$WORK/"
run_until() { local t=$(( $1 - SECONDS )); shift; [ "$t" -gt 5 ] || { echo "skipped (no time): $*"; return 0; }
  echo "== $(date -u +%T) [until $t s] $*"; timeout -s TERM -k 30 "$t" "$@"; echo "== exit $?"; }
certify() {  # certify SIGMA DEADLINE
  run_until "$2" $PY -m rsmooth certify --checkpoint "$CARRY/g$1" --data-dir "$CARRY/data" --device "$DEVICE" \
    --n "$N" "${MAXARG[@]}" --out "$WORK/full_$1.tsv"
  cp "$WORK/full_$1.tsv" "$WORK/full_$1.tsv.json" "$OUTDIR/" 2>/dev/null
}

{
  echo "== machine"; nvidia-smi -L 2>/dev/null; $PY -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name(), 'cudnn tf32', torch.backends.cudnn.allow_tf32, 'matmul tf32', torch.backends.cuda.matmul.allow_tf32)"
  lscpu | grep -m1 "Model name"
  if [ "${SMOKE:-1}" = 1 ]; then
    echo "== smoke"
    timeout 60 $PY -m rsmooth certify --checkpoint "$CARRY/g050" --data-dir "$CARRY/data" --device "$DEVICE" \
      --n 1000 --max 3 --out "$WORK/smoke.tsv" && cat "$WORK/smoke.tsv" || { echo "SMOKE FAILED"; exit 1; }
  fi
  certify 050 "${T_050:-270}"
  run_until "${T_TESTS:-300}" $PY -m pytest -q -p no:cacheprovider tests/test_gpu_ready.py -k cuda
  certify 025 "${T_025:-420}"
  RESUME=()  # a run an earlier lease gave back (CARRY/sadv050/{checkpoint.pt,config.json}) continues
  if [ -f "$CARRY/sadv050/checkpoint.pt" ]; then cp -r "$CARRY/sadv050" "$WORK/"; RESUME=(--resume); fi
  run_until "${T_SADV:-470}" $PY -m rsmooth train --preset fashion-mnist/smoothadv/0.50 --data-dir "$CARRY/data" --device "$DEVICE" \
    --out "$WORK/sadv050" --checkpoint-every 30s --workers 4 "${RESUME[@]}"
  cp "$WORK/sadv050/checkpoint.pt" "$OUTDIR/sadv050_checkpoint.pt" 2>/dev/null
  cp "$WORK/sadv050/config.json" "$OUTDIR/sadv050_config.json" 2>/dev/null
  cp "$WORK/sadv050/train.log" "$OUTDIR/sadv050_train.log" 2>/dev/null
  echo "== done at $SECONDS s"
} 2>&1 | tee "$LOG"
