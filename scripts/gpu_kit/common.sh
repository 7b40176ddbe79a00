# shellcheck shell=bash
# What the GPU kit's steps share (scripts/gpu_kit.sh sources this first): the
# places, the settings a run takes, and how a step that cannot do something
# says so and goes on.
OUT_DIR=${OUT:-$ROOT/gpu_out}
CPU=0
TESTS_ONLY=0
EPOCHS=2
# Each step bounded (seconds): one that hangs costs that step, not the
# machine's whole lease.
RUN_TIMEOUT=${GPU_KIT_RUN_TIMEOUT:-600}
TEST_TIMEOUT=${GPU_KIT_TEST_TIMEOUT:-300}
WORKERS=""
MISSING=()

# What could not be done, kept in OUT_DIR/missing.txt too, so that steps run
# one by one (gpu_kit.sh build, then bench, ...) are reported together.
note_missing() {
  MISSING+=("$1")
  echo "$1" >>"$OUT_DIR/missing.txt"
  echo "gpu_kit: could not: $1" >&2
}

# The python3 that imports torch (a venv's, a conda env's, or the system's).
find_python() {
  for py in "${PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$py" ] && "$py" -c "import torch" 2>/dev/null && { echo "$py"; return; }
  done
}


die() { echo "gpu_kit: error: $*" >&2; exit 2; }

# The sizes of a run: tiny on a CPU (the kit's own test), the real ones on a GPU.
set_sizes() {
  if [ "$CPU" = 1 ]; then
    device=cpu batch=8 size=32 per_class=6
    archs=(resnet18) amps=(off) WORKERS=${WORKERS:-1,2}
  else
    device=cuda batch=256 size=224 per_class=400
    archs=(resnet50 resnet18) amps=(bf16 fp16) WORKERS=${WORKERS:-1,2,4,8,15}
  fi
}
