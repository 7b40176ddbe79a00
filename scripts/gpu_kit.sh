#!/usr/bin/env bash
# The GPU check, for a GPU machine without internet that has CUDA, CMake and
# a PyTorch 2.x with CUDA, and none of shardkit's other dependencies. Its
# steps are files of their own in scripts/gpu_kit/:
#
#   scripts/gpu_kit.sh fetch     (here, on Debian 12, with apt; fetch.sh)
#       downloads the Debian packages the build needs and unpacks them into
#       .deps/root, with real photographs in .deps/photos. Carry .deps/ to the
#       GPU machine with the checkout (it stays under 64 MB).
#   scripts/gpu_kit.sh run [--cpu] [--tests-only] [--build DIR] [--out DIR]
#                          [--epochs N] [--workers LIST]
#       (there) the steps below in order; it goes on past a failing step and
#       ends by listing what it could not do:
#   build   (build.sh) configures CMake against that machine's PyTorch
#           (torch.utils.cmake_prefix_path) and .deps/ and builds what the
#           other steps run, into DIR (build-gpu; --cpu: build-gpukit-cpu).
#           A DIR that is already configured (--build build: the test suite's
#           own build/) is reused: only its targets are built, no configure.
#   test    (test.sh) the CUDA tests, bounded; a crash runs again under gdb
#           (or cuda-gdb), whose backtrace goes to cuda_tests_backtrace.log.
#   bench   (bench.sh) a real-photo JPEG set made and packed; both loaders
#           alone (what the cores decode); ResNet-50 and ResNet-18 with AMP
#           (bf16, fp16) and channels-last at batch 256 and 224 px:
#           shardkit-train at each loader worker count, the --synthetic
#           ceiling, and examples/train_imagenet.py with PyTorch's DataLoader
#           and with shardkit. Each run trains N epochs (2) and each row is its
#           last epoch (no row counts start-up).
#   report  (report.sh, report.py) the tables (markdown, CSV) into DIR ($OUT,
#           else gpu_out/), and what could not be done.
#   Each step alone: scripts/gpu_kit.sh build|test|bench|report [the options].
#       GPU_KIT_RUN_TIMEOUT (600) and GPU_KIT_TEST_TIMEOUT (300) bound each
#       training run and the CUDA tests, in seconds. --cpu runs the steps on
#       this machine's CPU with tiny sizes (the kit's own test: scripts/test.sh
#       runs it on the suite's build). --tests-only: build and test only.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=$ROOT/.deps
KIT=$ROOT/scripts/gpu_kit
# shellcheck source=scripts/gpu_kit/common.sh
for part in common fetch build test bench report; do source "$KIT/$part.sh"; done

usage() {
  echo "usage: scripts/gpu_kit.sh fetch | run|build|test|bench|report [--cpu] [--tests-only]" \
    "[--build DIR] [--out DIR] [--epochs N] [--workers LIST]" >&2
  exit 2
}

# The options every step but fetch takes, checked once.
parse_options() {
  BUILD_DIR=""
  while [ $# -gt 0 ]; do
    case $1 in --out | --epochs | --workers | --build) [ $# -ge 2 ] || die "$1 needs a value" ;; esac
    case $1 in
      --cpu) CPU=1 ;;
      --tests-only) TESTS_ONLY=1 ;;
      --out) OUT_DIR=$2; shift ;;
      --build) BUILD_DIR=$2; shift ;;
      --epochs) EPOCHS=$2; shift ;;
      --workers) WORKERS=$2; shift ;;
      *) usage ;;
    esac
    shift
  done
  # The first epoch is start-up: a row is a later one.
  [[ $EPOCHS =~ ^[0-9]{1,6}$ ]] && [ "$EPOCHS" -ge 2 ] || die "--epochs must be a whole number, at least 2"
  [[ -z $WORKERS || $WORKERS =~ ^[1-9][0-9]{0,3}(,[1-9][0-9]{0,3})*$ ]] ||
    die "--workers must be a comma-separated list of worker counts (1-9999), e.g. 1,2,4"
  local t
  for t in RUN_TIMEOUT TEST_TIMEOUT; do
    [[ ${!t} =~ ^[1-9][0-9]{0,5}$ ]] || die "GPU_KIT_$t must be a whole number of seconds, not '${!t}'"
  done
  if [ -z "$BUILD_DIR" ]; then
    BUILD_DIR=$ROOT/build-gpu
    [ "$CPU" = 1 ] && BUILD_DIR=$ROOT/build-gpukit-cpu
  fi
  BUILD_DIR=$(realpath -m "$BUILD_DIR")
  mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"
  PY=$(find_python)
  [ -n "$PY" ] || die "no python3 that imports torch (set PYTHON=...)"
  set_sizes
}

describe_machine() {
  {
    echo "device: $("$PY" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')")"
    echo "torch: $("$PY" -c "import torch; print(torch.__version__, 'cuda', torch.version.cuda)")"
    echo "python: $("$PY" --version 2>&1) at $(command -v "$PY")"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "cpus: $(nproc)"
  } | tee "$OUT_DIR/machine.txt"
}

build_step() {
  echo "== build ($BUILD_DIR)"
  configure_and_build "$BUILD_DIR" "$PY" || { note_missing "configure or build (see configure.log, build.log)"; return 2; }
}

test_step() {
  echo "== CUDA tests (skipped without a GPU), collectives and device choice"
  cuda_tests "$BUILD_DIR"
}

step=${1:-}
[ $# -gt 0 ] && shift
case $step in
  fetch) [ $# -eq 0 ] || usage; fetch ;;
  run)
    parse_options "$@"
    t0=$SECONDS
    : >"$OUT_DIR/results.csv"
    : >"$OUT_DIR/missing.txt"
    describe_machine
    if build_step; then
      test_step
      [ "$TESTS_ONLY" = 1 ] || bench_step "$BUILD_DIR"
    fi
    report_step "$t0"
    ;;
  build) parse_options "$@"; build_step ;;
  test) parse_options "$@"; test_step ;;
  bench) parse_options "$@"; describe_machine; bench_step "$BUILD_DIR" ;;
  report) parse_options "$@"; report_step "$SECONDS" ;;
  *) usage ;;
esac
