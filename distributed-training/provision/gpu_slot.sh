#!/usr/bin/env bash
# The whole command for a lent GPU: one call, one time box, everything it learns written into $OUT.
#
# A lent machine (one H100 or H200, Python 3.12, torch 2.11+cu130 in its python3, no TransformerEngine or
# torchao, no network) takes a command of at most 2,000 characters and 10 minutes, the tracked tree plus the
# kit (64 MiB in all), and gives back only the files of $OUT. This script is that command:
#   1  the versions: Python, torch and its CUDA, the GPU and driver, the kit's target, the commit
#   2  make gpu-quick under what is left of SLOT_S: the kit installed (offline-install), doctor, the run list
#      (RUNS, default: what the committed results for this GPU lack, provision/slot_plan.py), then the GEMM
#      rates and the bench if time remains; a TE run is dropped with one line where TE does not import
#   3  the closing table, the results archive and the whole log in $OUT (gpu_slot.log, gpu_quick_<tag>.log,
#      gpu_quick_<tag>.txt, results_*.tar.gz: four files, no folder); if gpu-quick left no archive, one is made
#
#   make gpu-quick GPU=h200 BUDGET_S=550 KIT=kit ARGS=--dry-run            # first, at home: what it will buy
#   REHEARSAL=1 KIT= OUT=/tmp/slot SLOT_S=300 bash distributed-training/provision/gpu_slot.sh  # CPU rehearsal
#   DT_GIT_COMMIT=<sha> bash distributed-training/provision/gpu_slot.sh    # the lent machine: kit/ carried, 595 s
#
# Environment: OUT (required: the folder that comes back), SLOT_S (570: the whole command, under the 600 s a
# command may run), PYTHON (python3), KIT (kit/ where it holds a MANIFEST.json), GPU (auto), RUNS (empty),
# REHEARSAL (1: GPU=cpu on CPU stand-ins), DT_GIT_COMMIT (the commit: no .git travels), ARGS (gpu-quick flags).
set -uo pipefail
start=$(date +%s)
if [ -z "${OUT:-}" ]; then
  echo "error: gpu_slot.sh needs OUT=<folder> (what comes back from the machine)" >&2; exit 2
fi
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT";; esac
cd "$(dirname "$0")/../.." || exit 2
SLOT_S=${SLOT_S:-570}
case "$SLOT_S" in ''|*[!0-9]*) echo "error: SLOT_S=$SLOT_S; allowed: whole seconds, 20 to 600" >&2; exit 2;; esac
if [ "$SLOT_S" -lt 20 ] || [ "$SLOT_S" -gt 600 ]; then
  echo "error: SLOT_S=$SLOT_S; allowed: whole seconds, 20 to 600" >&2; exit 2
fi
PYTHON=${PYTHON:-python3}
KIT=${KIT-$([ -f kit/MANIFEST.json ] && echo kit)}
GPU=${GPU:-auto}
case "${REHEARSAL:-}" in ''|0) REHEARSAL=;; *) REHEARSAL=1; GPU=cpu;; esac
mkdir -p "$OUT" || exit 2

slot() {
  echo "== gpu-slot: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${DT_GIT_COMMIT:-unknown}, ${SLOT_S} s in all"
  "$PYTHON" - <<'EOF'
import importlib.util, platform, sys
print(f"python      {sys.version.split()[0]} ({platform.machine()}, {platform.platform()})")
try:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none that torch can use"
    print(f"torch       {torch.__version__} (CUDA {torch.version.cuda}); GPU: {gpu}")
except Exception as e:  # the versions are a record, never a reason to stop
    print(f"torch       not usable: {type(e).__name__}: {e}")
print("before kit  " + ", ".join(f"{m} {'yes' if importlib.util.find_spec(m) else 'no'}"
                                 for m in ("transformer_engine", "torchao", "pandas", "matplotlib")))
EOF
  local smi
  smi=$(timeout -k 2 "${DT_SMI_TIMEOUT_S:-15}" nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader 2>&1) || smi="none, or no answer within ${DT_SMI_TIMEOUT_S:-15} s"
  echo "nvidia-smi  ${smi:-lists no GPU}"
  if [ -n "$KIT" ]; then
    "$PYTHON" -c 'import json, sys; t = json.load(open(sys.argv[1]))["target"]; print("kit        ", t)' \
      "$KIT/MANIFEST.json" 2>&1 || echo "kit         $KIT holds no readable MANIFEST.json"
  fi
  # gpu-quick ends within its budget, its end included; if that end overran, SIGTERM 5 s after it (its end
  # ignores it) and SIGKILL at SLOT_S - 5 s, and a fallback archive until the command's limit (SLOT_S + 25 s)
  local left=$(( SLOT_S - ($(date +%s) - start) - 15 ))
  echo "== gpu-slot: make gpu-quick with ${left} s"
  timeout -s TERM -k 5 $(( left + 5 )) make -s PYTHON="$PYTHON" gpu-quick GPU="$GPU" BUDGET_S="$left" \
    ARCHIVE_DIR="$OUT" KIT="$KIT" RUNS="${RUNS:-}" REHEARSAL="$REHEARSAL" ARGS="${ARGS:-}"
  local rc=$?
  if ! compgen -G "$OUT/results_*.tar.gz" >/dev/null; then
    echo "== gpu-slot: gpu-quick left no archive (exit $rc): make results-archive"
    local spare=$(( SLOT_S + 20 - ($(date +%s) - start) ))
    timeout -k 2 $(( spare > 5 ? spare : 5 )) make -s PYTHON="$PYTHON" results-archive ARCHIVE_DIR="$OUT" || rc=1
  fi
  echo "== gpu-slot: exit $rc after $(( $(date +%s) - start )) s of ${SLOT_S}; in $OUT:"
  ls -l "$OUT"
  return $rc
}

slot 2>&1 | tee -a "$OUT/gpu_slot.log"
exit "${PIPESTATUS[0]}"
