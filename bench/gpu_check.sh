#!/usr/bin/env bash
# bench/gpu_check.sh: every CUDA path of vsbench once, at a size where start-up is amortized, in one table.
#
#   bench/gpu_check.sh                                           # CUDA, 20,000 generated bins: sized for < 10 min of one H100
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_IMAGES=300 bench/gpu_check.sh # dry run on the CPU (tests/unit/test_gpu_check.py)
#
# What it runs (issue 40), from the source tree (PYTHONPATH=src: no install, no network):
#   1. `vsbench synth abid` (GPU_CHECK_IMAGES bins, all cores), `abid prepare`, `abid resize` to 224 px;
#   2. embed every generated photo (varied sizes, resize + crop) with GPU_CHECK_MODEL (random weights: no
#      download) twice: --decode gpu (nvJPEG, batched, through the feeder one batch ahead) and --decode cpu
#      (Pillow in the workers); images/s of each as the manifest states it, its per-stage timeline of one
#      steady batch (read, copy, decode, network, write: CUDA events), the network alone on tensors already
#      on the device (same batch, precision, compile mode) and each path's ratio to it (issue 58), and the
#      per-image cosine between the two (nvJPEG's IDCT vs libjpeg's);
#   3. decode rates alone: Pillow decode+resize on one core vs batched decode+resize on the device;
#   4. `abid train counting` and `abid train siamese` (profile full, GPU_CHECK_EPOCHS epochs): the last
#      epoch's images/s (steady state) and the first's;
#   5. `similarity run` on the disc generator's set with --device cuda and with --device cpu: the two tables.
# Knobs: GPU_CHECK_IMAGES (20000), GPU_CHECK_DEVICE (cuda), GPU_CHECK_WORK (/tmp/vsbench-gpu-check),
# GPU_CHECK_WORKERS (cores), GPU_CHECK_BATCH (256), GPU_CHECK_WHEELS (bench/wheels), PYTHON (python3),
# GPU_CHECK_EMBED_PHOTOS (all: how many of the photos stage 2 embeds and decodes);
# GPU_CHECK_MODEL, GPU_CHECK_PROFILE, GPU_CHECK_EPOCHS: resnet50, full, 2 on CUDA (efficientnet_lite0, demo
# at 32 px, 1 on the CPU dry run).
#
# Wheels: a bare GPU machine has Python 3.12, torch, torchvision and timm (so numpy, pillow, pyyaml, tqdm,
# huggingface_hub, safetensors). What else vsbench imports when these commands run (read from its imports;
# the preflight below names anything still missing):
#   typer (click, rich, shellingham)           the CLI
#   pydantic (pydantic-core, annotated-types, typing-extensions, typing-inspection)   run specs, profiles
#   mlflow (mlflow-skinny, mlflow-tracing, and its tree: pandas, pyarrow, matplotlib, scipy, sqlalchemy,
#     alembic, fastapi/starlette, opentelemetry, databricks-sdk, cachetools, protobuf, requests, ...)
#                                              vsbench.tracking, imported by every step (runs here with --no-track)
#   cryptography                               imported under mlflow's and requests' trees at run time
#   faiss-cpu                                  index and search
#   simplejpeg                                 the fast CPU JPEG path and the completeness check
# Carry them as a folder of wheels beside this script (bench/wheels/, or GPU_CHECK_WHEELS), built once on a
# machine with network for the GPU machine's Python and platform:
#   pip download -d bench/wheels --only-binary=:all: --python-version 3.12 \
#       --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
#       typer pydantic typing-inspection mlflow cryptography faiss-cpu simplejpeg
# This script unpacks every wheel whose distribution the machine does not have yet into $WORK/site and puts
# that on PYTHONPATH (no pip run, nothing installed; torch's numpy and pillow stay the ones in use). Or
# install them yourself: pip install --no-index --find-links bench/wheels typer pydantic mlflow faiss-cpu ...
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
PY="${PYTHON:-python3}"
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
IMAGES="${GPU_CHECK_IMAGES:-20000}"  # at least ~60: the siamese task files need ~50 eligible bins
WORK="${GPU_CHECK_WORK:-/tmp/vsbench-gpu-check}"
WORKERS="${GPU_CHECK_WORKERS:-$(nproc)}"
BATCH="${GPU_CHECK_BATCH:-256}"
WHEELS="${GPU_CHECK_WHEELS:-$HERE/wheels}"
if [ "$DEVICE" = cpu ]; then  # the dry run: a light model, the demo profile at 32 px, one epoch
  MODEL="${GPU_CHECK_MODEL:-efficientnet_lite0}" PROFILE="${GPU_CHECK_PROFILE:-demo}" EPOCHS="${GPU_CHECK_EPOCHS:-1}" SIZE=32
  TRAIN_DECODE=gpu  # the batched decode's code path on the CPU, as CUDA takes it by default
else
  MODEL="${GPU_CHECK_MODEL:-resnet50}" PROFILE="${GPU_CHECK_PROFILE:-full}" EPOCHS="${GPU_CHECK_EPOCHS:-2}" SIZE=224
  TRAIN_DECODE=auto
fi

mkdir -p "$WORK"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export VSBENCH_EMBED_CACHE=off  # every embed is measured, not read back from an earlier run
export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-file://$WORK/mlruns}"
export TQDM_DISABLE=1

if [ -d "$WHEELS" ]; then  # unpack what the machine lacks: a wheel is a zip of importable files
  "$PY" - "$WHEELS" "$WORK/site" <<'EOF'
import re, sys, zipfile
from importlib import metadata
from pathlib import Path
wheels, site = Path(sys.argv[1]), Path(sys.argv[2])
site.mkdir(parents=True, exist_ok=True)
for wheel in sorted(wheels.glob("*.whl")):
    name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    try:
        metadata.version(name)
        continue  # the machine has it (torch's numpy, pillow, ...): keep that one
    except metadata.PackageNotFoundError:
        pass
    if not (site / f".{wheel.name}").exists():
        zipfile.ZipFile(wheel).extractall(site)
        (site / f".{wheel.name}").touch()
EOF
  export PYTHONPATH="$PYTHONPATH:$WORK/site"
fi

"$PY" - <<'EOF'  # preflight: one line naming what is missing
import importlib, sys
needed = {"typer": "typer", "pydantic": "pydantic", "typing_inspection": "typing-inspection", "mlflow": "mlflow",
          "faiss": "faiss-cpu", "simplejpeg": "simplejpeg", "cryptography": "cryptography", "torch": "torch",
          "torchvision": "torchvision", "PIL": "pillow", "numpy": "numpy", "tqdm": "tqdm", "yaml": "pyyaml"}
missing = []
for module, wheel in needed.items():
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - an import that fails for any reason is missing
        missing.append(f"{wheel} ({type(exc).__name__}: {str(exc)[:80]})")
if missing:
    sys.exit("gpu_check: missing: " + "; ".join(missing) + ". Carry them as bench/wheels/ (see this script's header)")
EOF

VSB=("$PY" -m vsbench)
RESULTS="$WORK/results"
rm -rf "$RESULTS" && mkdir -p "$RESULTS"
started=$(date +%s)
stamp() { echo "[gpu_check $(( $(date +%s) - started )) s] $*" >&2; }
timed() {  # timed NAME command...: its wall seconds into results/NAME.seconds
  local name=$1; shift
  local t0=$EPOCHREALTIME
  "$@"
  "$PY" -c "print(round($EPOCHREALTIME - $t0, 3))" > "$RESULTS/$name.seconds"
}

stamp "generating $IMAGES bins on $WORKERS cores"
if [ "$(cat "$WORK/raw.bins" 2>/dev/null)" != "$IMAGES" ]; then
  timed synth "${VSB[@]}" synth abid --out "$WORK/raw" --bins "$IMAGES" --workers "$WORKERS" > "$RESULTS/synth.json"
  echo "$IMAGES" > "$WORK/raw.bins"
  rm -rf "$WORK/tasks" "$WORK/images"
fi
[ -d "$WORK/tasks" ] || "${VSB[@]}" abid prepare --data "$WORK/raw" --out "$WORK/tasks" --val-fraction 0.25 > /dev/null
[ -d "$WORK/images" ] || timed resize "${VSB[@]}" abid resize --data "$WORK/raw" --out "$WORK/images" --size 224 \
  --workers "$WORKERS" > /dev/null

stamp "embedding every photo with $MODEL on $DEVICE, decoded on the device and by Pillow"
"$PY" "$HERE/gpu_check_embed.py" --photos "$WORK/raw/bin-images" --out "$WORK/embed" --results "$RESULTS" \
  --device "$DEVICE" --model "$MODEL" --batch-size "$BATCH" --workers "$WORKERS" --limit "${GPU_CHECK_EMBED_PHOTOS:-0}"

rm -rf "$WORK/runs"
for task in counting siamese; do
  stamp "training $task ($PROFILE, $EPOCHS epochs) on $DEVICE"
  overrides="{\"epochs\": $EPOCHS, \"workers\": $WORKERS, \"image_size\": $SIZE}"
  "${VSB[@]}" abid train "$task" --tasks "$WORK/tasks" --images "$WORK/images" --out "$WORK/runs/$task" \
    --profile "$PROFILE" --overrides "$overrides" --device "$DEVICE" --decode "$TRAIN_DECODE" \
    > "$RESULTS/train_$task.log" 2>&1 \
    || { tail -20 "$RESULTS/train_$task.log" >&2; exit 1; }
done

stamp "similarity run on the disc generator's set: $DEVICE and cpu"
[ -d "$WORK/disc" ] || "${VSB[@]}" synth similarity disc --out "$WORK/disc" > /dev/null
for where in "$DEVICE" cpu; do
  decode=auto; [ "$where" = cpu ] && decode=cpu
  rm -rf "$WORK/similarity-$where"
  "${VSB[@]}" similarity run --benchmark disc --root "$WORK/disc" --out "$WORK/similarity-$where" --model "$MODEL" \
    --model-options '{"weights": "random"}' --device "$where" --decode "$decode" --batch-size 64 --no-track \
    > "$RESULTS/similarity_$where.log" 2>&1 || { tail -20 "$RESULTS/similarity_$where.log" >&2; exit 1; }
  [ "$where" = "$DEVICE" ] && [ "$DEVICE" = cpu ] && break  # the dry run has one device
done

stamp "done"
"$PY" "$HERE/gpu_check_embed.py" --table --work "$WORK" --results "$RESULTS" --device "$DEVICE" --workers "$WORKERS" \
  --seconds "$(( $(date +%s) - started ))"
