#!/usr/bin/env bash
# GPU readiness in a few minutes, on a machine with a CUDA device:
#   1. python train.py mode=overfit n=2 trainer=gpu                  bf16-mixed: preflight, then PASS/FAIL
#   2. the same with compile=true                                    torch.compile (inductor, Triton kernels)
#   3. mode=full, the default model and model=gpt, every copy to the host CUDA sees counted by the line that asked
#      (torch.cuda.set_sync_debug_mode): the harness's own must be none on a step that logs nothing, one on a
#      logging step (tests/helpers/host_copies.py; tests/perf/test_host_copies.py counts the same on a CPU)
#   4. mode=full with model=hf (llama, gpt2) and the default model: no host_sync symptom (CUDA's sync debug mode
#      sees what transformers copies), an MFU that is a share of the datasheet's peak (at most 1) or a named fault,
#      and perf.wall's phases adding up to its total (the CUDA events read once the fit ends)
#   5. BENCH_ACCELERATOR=gpu python -m benchmarks probes          what the probes cost a training step, on the GPU
# Prints each result and exits non-zero if any step fails (2 when there is no GPU at all).
#   scripts/gpu_check.sh                  PYTHON=python3 scripts/gpu_check.sh   (default: .venv/bin/python)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
OUT="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"

if ! "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no CUDA device visible to $PYTHON (torch.cuda.is_available() is False, or torch is" \
       "missing); run this on a GPU machine, with a CUDA build of torch" >&2
  exit 2
fi
"$PYTHON" -c 'import torch; p = torch.cuda.get_device_properties(0); print(f"device: {p.name}, \
{p.total_memory / 2**30:.0f} GiB, bf16 {torch.cuda.is_bf16_supported()}, torch {torch.__version__}")'

# verdict DIR: one line out of DIR/verdict.json; fails unless the status is PASS
verdict() {
  "$PYTHON" - "$1" <<'PY'
import json, sys
v = json.load(open(f"{sys.argv[1]}/verdict.json"))
bad = [c["name"] for c in v.get("checks", []) if c["status"] == "FAIL"]
print(f"  {v['status']}: {v['steps']} steps, loss {v['final_loss']}, {v['seconds']} s, "
      f"preflight {len(v['checks'])} checks{', FAILED: ' + ', '.join(bad) if bad else ''}")
sys.exit(0 if v["status"] == "PASS" else 1)
PY
}

failures=0
# overfit NAME ARGS...: one overfit run on the GPU, its log kept in $OUT/NAME.log
overfit() {
  local name="$1"
  shift
  echo "== $name: train.py mode=overfit n=2 trainer=gpu $*"
  if timeout 600 "$PYTHON" train.py mode=overfit n=2 trainer=gpu "$@" "hydra.run.dir=$OUT/$name" \
       >"$OUT/$name.log" 2>&1 && verdict "$OUT/$name"; then
    return 0
  fi
  echo "  FAILED; the last lines of $OUT/$name.log:"
  tail -n 20 "$OUT/$name.log"
  failures=$((failures + 1))
}

overfit bf16
overfit compiled compile=true

# copies NAME ARGS...: a 30-step mode=full run on the GPU under CUDA's sync debug mode, the harness's copies judged
copies() {
  local name="$1"
  shift
  echo "== copies to the host, $name: train.py mode=full trainer=gpu $*"
  if timeout 600 "$PYTHON" train.py mode=full mode.max_steps=30 preflight=false trainer=gpu "$@" \
       "+callbacks.copies._target_=tests.helpers.host_copies.HostCopies" \
       "+callbacks.copies.path=$OUT/$name.copies.json" "hydra.run.dir=$OUT/$name" >"$OUT/$name.log" 2>&1 \
       && "$PYTHON" -m tests.helpers.host_copies "$OUT/$name.copies.json" 30 | sed 's/^/  /'; then
    return 0
  fi
  echo "  FAILED; the last lines of $OUT/$name.log:"
  tail -n 20 "$OUT/$name.log"
  failures=$((failures + 1))
}

copies default
copies gpt model=gpt

# healthy NAME ARGS...: a 40-step mode=full run on the GPU that must name no host_sync, report an MFU of at most 1
# (or say why it has none) and account for its wall time
healthy() {
  local name="$1"
  shift
  echo "== healthy run, $name: train.py mode=full trainer=gpu $*"
  if timeout 600 "$PYTHON" train.py mode=full mode.max_steps=40 mode.val_every=20 trainer=gpu "$@" \
       "hydra.run.dir=$OUT/$name" >"$OUT/$name.log" 2>&1 && "$PYTHON" - "$OUT/$name" <<'PY'
import json, sys
v = json.load(open(f"{sys.argv[1]}/verdict.json"))
perf, syncs = v.get("perf") or {}, [s for s in v.get("symptoms", []) if s["name"] == "host_sync"]
wall, mfu = perf.get("wall") or {}, perf.get("mfu")
summed = sum((wall.get("seconds") or {}).values())
print(f"  {v['status']}: MFU {mfu} ({perf.get('mfu_fault') or perf.get('peak')}), wall {summed:.2f} of "
      f"{wall.get('total')} s, host_sync {[s['where'] for s in syncs]}")
ok = v["status"] == "DONE" and not syncs and (mfu is None or 0 < mfu <= 1)
sys.exit(0 if ok and abs(summed - wall.get("total", 0)) <= 0.05 * wall.get("total", 0) else 1)
PY
  then
    return 0
  fi
  echo "  FAILED; the last lines of $OUT/$name.log:"
  tail -n 20 "$OUT/$name.log"
  failures=$((failures + 1))
}

healthy default
healthy hf_llama model=hf model.arch=llama
healthy hf_gpt2 model=hf model.arch=gpt2

echo "== probe benchmark: BENCH_ACCELERATOR=gpu python -m benchmarks probes"
if ! BENCH_ACCELERATOR=gpu timeout 900 "$PYTHON" -m benchmarks probes; then
  echo "  FAILED"
  failures=$((failures + 1))
fi

echo "outputs: $OUT"
if ((failures)); then
  echo "gpu_check: $failures step(s) failed" >&2
  exit 1
fi
echo "gpu_check: all passed"
