#!/usr/bin/env bash
# The GPU check in one command, for a GPU machine without internet that has
# CUDA, CMake and a PyTorch 2.x with CUDA, and none of shardkit's other
# dependencies.
#
#   scripts/gpu_kit.sh fetch          (here, on Debian 12, with apt)
#       downloads the Debian packages the build needs (apt-get download) and
#       unpacks them (dpkg -x) into .deps/root, with a few real photographs in
#       .deps/photos to make a JPEG set from. .deps/ is ignored by git; carry
#       it to the GPU machine with the checkout (it stays under 64 MB).
#   scripts/gpu_kit.sh run [--cpu] [--tests-only] [--out DIR] [--epochs N] [--workers LIST]
#       (there) configures CMake against that machine's PyTorch
#       (torch.utils.cmake_prefix_path) and .deps/, builds, runs the CUDA
#       tests, makes and packs a real-photo JPEG set, measures both loaders
#       alone (no model, no GPU: what the cores decode), and benchmarks ResNet-50
#       and ResNet-18 with AMP (bf16, fp16) and channels-last at batch 256 and
#       224 px: shardkit-train from shards at each loader worker count, the
#       same model on --synthetic data (the ceiling), and
#       examples/train_imagenet.py with PyTorch's DataLoader and with
#       shardkit. Each run trains N epochs (2) of the set and each row is its
#       last epoch, so that no row counts start-up (cuDNN's autotuning, the
#       workers' start) and every row counts the same epoch start. Tables
#       (markdown and CSV) and logs go to DIR ($OUT if set,
#       else gpu_out/). It goes on past a failing step and ends by listing
#       what it could not do.
#       GPU_KIT_RUN_TIMEOUT (600) and GPU_KIT_TEST_TIMEOUT (300) bound each
#       training run and the CUDA tests, in seconds.
#       --cpu runs the same steps on this machine's CPU with tiny sizes,
#       built from .deps/ against Debian's LibTorch: the kit's own test.
#       --tests-only stops after the build and the CUDA tests (a quick look
#       at a fix). A test binary that crashes runs again under gdb (or
#       cuda-gdb), whose backtrace goes to cuda_tests_backtrace.log.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=$ROOT/.deps

# Build dependencies (and the libraries they link) that a CUDA machine with
# a compiler, CMake and PyTorch lacks. libc, libstdc++, libgomp, zlib's
# runtime and libcurl (with its -dev files: object storage) are the
# machine's own: Debian's libcurl, first on LD_LIBRARY_PATH, would need
# Debian's libssh2, libldap, ... there (seen on Ubuntu 24.04).
KIT_PACKAGES=(
  libzstd-dev libzstd1 libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo
  libpng-dev libpng16-16 zlib1g-dev
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libsz2 libaec0 libaec-dev libmatio-dev libmatio11
  libcli11-dev nlohmann-json3-dev libgtest-dev pybind11-dev
)

die() { echo "gpu_kit: error: $*" >&2; exit 2; }

fetch() {
  command -v apt-get >/dev/null || die "fetch needs apt-get (run it on Debian 12)"
  rm -rf "$DEPS.tmp" && mkdir -p "$DEPS.tmp/debs" "$DEPS.tmp/root" "$DEPS.tmp/photos" || exit 2
  if ! (cd "$DEPS.tmp/debs" && apt-get download "${KIT_PACKAGES[@]}" >/dev/null 2>&1); then
    apt-get update -qq >/dev/null 2>&1  # a machine whose package lists are old or absent
    (cd "$DEPS.tmp/debs" && apt-get download "${KIT_PACKAGES[@]}" >/dev/null) || die "apt-get download failed"
  fi
  for deb in "$DEPS.tmp"/debs/*.deb; do dpkg -x "$deb" "$DEPS.tmp/root" || die "dpkg -x $deb"; done
  # Documentation, tools and static libraries (but GoogleTest's) are not
  # needed to build: shardkit links the shared ones.
  rm -rf "$DEPS.tmp/root/usr/share/doc" "$DEPS.tmp/root/usr/share/man" "$DEPS.tmp/root/usr/bin"
  find "$DEPS.tmp/root" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete
  rm -rf "$DEPS.tmp/debs"
  local photos=(/usr/share/backgrounds/mate/nature/*.jpg)
  [ -e "${photos[0]}" ] || die "no photographs: apt-get install mate-backgrounds"
  cp "${photos[@]}" "$DEPS.tmp/photos/"
  rm -rf "$DEPS" && mv "$DEPS.tmp" "$DEPS"
  echo "gpu_kit: fetched ${#KIT_PACKAGES[@]} packages and ${#photos[@]} photographs into .deps ($(du -sh "$DEPS" | cut -f1))"
}

# ---- run

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

note_missing() { MISSING+=("$1"); echo "gpu_kit: could not: $1" >&2; }

# The python3 that imports torch (a venv's, a conda env's, or the system's).
find_python() {
  for py in "${PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$py" ] && "$py" -c "import torch" 2>/dev/null && { echo "$py"; return; }
  done
}

configure_and_build() {
  local build=$1 py=$2 prefix="$DEPS/root/usr" args=() keep_going=() pyb
  args+=(-DCMAKE_BUILD_TYPE=Release)
  if [ "$CPU" = 1 ]; then
    # Debian's LibTorch, found where the system keeps it; everything else
    # from .deps first (CMAKE_PREFIX_PATH is searched before system paths).
    args+=("-DCMAKE_PREFIX_PATH=$prefix")
  else
    local torch_prefix nccl
    torch_prefix=$("$py" -c "import torch.utils; print(torch.utils.cmake_prefix_path)") ||
      return 1
    args+=("-DCMAKE_PREFIX_PATH=$torch_prefix;$prefix")
    # nccl.h from the nvidia-nccl wheel beside a pip PyTorch, if there.
    nccl=$("$py" -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'include'))" \
      2>/dev/null || true)
    [ -n "$nccl" ] && [ -f "$nccl/nccl.h" ] && args+=("-DSHARDKIT_NCCL_INCLUDE_DIR=$nccl")
    # That Python's own pybind11, where it has one, before .deps' (Debian's
    # 2.10 predates Python 3.12).
    pyb=$("$py" -c "import pybind11; print(pybind11.get_cmake_dir())" 2>/dev/null || true)
    [ -n "$pyb" ] && [ -d "$pyb" ] && args+=("-Dpybind11_DIR=$pyb")
  fi
  args+=("-DPython3_EXECUTABLE=$(command -v "$py")")
  # Asked for each time: a build folder whose last configure fell back to no
  # binding (below) keeps OFF in its cache otherwise.
  args+=(-DSHARDKIT_WITH_PYTHON=ON)
  # Ninja, told to go on past a failing file, so that one run lists every
  # compile error (a GPU machine's time is scarce).
  command -v ninja >/dev/null && args+=(-G Ninja) && keep_going=(-- -k 0)
  export PKG_CONFIG_SYSROOT_DIR=$DEPS/root
  export PKG_CONFIG_LIBDIR=$DEPS/root/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS/root/usr/share/pkgconfig
  export LD_LIBRARY_PATH=$prefix/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu/hdf5/serial${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # Debian's serial HDF5 under its own folders; FindHDF5 finds it there only
  # through the h5cc wrapper, whose paths are /usr's: name the files instead.
  args+=("-DSHARDKIT_HDF5_INCLUDE_DIR=$prefix/include/hdf5/serial"
    "-DSHARDKIT_HDF5_LIBRARY=$prefix/lib/x86_64-linux-gnu/hdf5/serial/libhdf5.so")
  # Debian's arch-specific headers (jconfig.h, JPEG_LIB_VERSION 62) before
  # the machine's: its own libjpeg-dev's jconfig.h says 80, and a 62 library
  # built against it overruns its callers' structs (seen on Ubuntu 24.04).
  args+=("-DCMAKE_C_FLAGS=-isystem $prefix/include/x86_64-linux-gnu"
    "-DCMAKE_CXX_FLAGS=-isystem $prefix/include/x86_64-linux-gnu")
  # The libraries those link at run time (libhdf5's libsz, libaec, ...).
  args+=("-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$prefix/lib/x86_64-linux-gnu")
  if ! cmake -S . -B "$build" "${args[@]}" >"$OUT_DIR/configure.log" 2>&1; then
    # Without the binding (no Python headers there, say) rather than nothing.
    note_missing "configure with the Python binding (see configure.log); trying without it"
    cmake -S . -B "$build" "${args[@]}" -DSHARDKIT_WITH_PYTHON=OFF >>"$OUT_DIR/configure.log" 2>&1 ||
      return 1
  fi
  # Proof that the build used .deps, not a system -dev package.
  grep -E '^(SHARDKIT_ZSTD_INCLUDE|ZSTD_INCLUDEDIR|ZSTD_INCLUDE_DIRS|CLI11_DIR|nlohmann_json_DIR|GTest_DIR):' \
    "$build/CMakeCache.txt" >"$OUT_DIR/dependencies.txt" || true
  local targets=(shardkit-train shardkit-pack shardkit-bench train_test)
  [ "$TESTS_ONLY" = 1 ] && targets=(shardkit-train train_test)
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" "${keep_going[@]}" >"$OUT_DIR/build.log" 2>&1 ||
    return 1
  [ "$TESTS_ONLY" = 1 ] && return 0
  cmake --build "$build" -j"$(nproc)" --target _shardkit >>"$OUT_DIR/build.log" 2>&1 ||
    note_missing "build the Python binding (see build.log)"
}

# One row: name, images/s, data-wait fraction, from a JSON line's fields.
json_field() { # FILE FIELD
  "$PY" -c "import json,sys; l=[json.loads(x) for x in open(sys.argv[1]) if x.startswith('{')]; v=l[-1].get(sys.argv[2]) if l else None; print('' if v is None else v)" "$1" "$2" 2>/dev/null
}

bench_row() { # MODEL AMP LOADER WORKERS JSONFILE IPS_FIELD WAIT_FIELD [START_FIELD [BUSY_FIELD]]
  local ips wait start="" busy=""
  ips=$(json_field "$5" "$6")
  wait=$(json_field "$5" "$7")
  [ -n "${8:-}" ] && start=$(json_field "$5" "$8")
  [ -n "${9:-}" ] && busy=$(json_field "$5" "$9")
  if [ -z "$ips" ]; then
    note_missing "$1 $2 $3 workers=$4 (see $(basename "$5" .json).log)"
    return
  fi
  printf '%s,%s,%s,%s,%.1f,%.3f,%s,%s\n' "$1" "$2" "$3" "$4" "$ips" "${wait:-0}" "$start" "$busy" \
    >>"$OUT_DIR/results.csv"
}

# The loaders alone, no model and no GPU (what the machine's cores can
# decode, per worker count): shardkit-bench loader on the shards, PyTorch's
# DataLoader + torchvision on the JPEG folders, the train transform at the
# kit's batch and size. Rows with model and amp '-'.
loaders_alone() { # BUILD SHARDS JPEG_DIR
  local common=(--workers "$WORKERS" --batch "$batch" --size "$size" --batches 30 --repeat 1)
  echo "-- shardkit-bench loader, workers $WORKERS"
  timeout "$RUN_TIMEOUT" "$1/tools/bench/shardkit-bench" loader "$2" "${common[@]}" --warmup 4 --json \
    >"$OUT_DIR/alone_shardkit.json" 2>"$OUT_DIR/alone_shardkit.log" &&
    alone_rows "shardkit loader alone" "$OUT_DIR/alone_shardkit.json" ||
    note_missing "the shardkit loader alone (see alone_shardkit.log)"
  echo "-- PyTorch DataLoader alone, workers $WORKERS"
  timeout "$RUN_TIMEOUT" "$PY" bench/pytorch_loader.py imagefolder "$3" "${common[@]}" --warmup 2 \
    >"$OUT_DIR/alone_pytorch.json" 2>"$OUT_DIR/alone_pytorch.log" &&
    alone_rows "DataLoader alone" "$OUT_DIR/alone_pytorch.json" ||
    note_missing "the DataLoader alone (see alone_pytorch.log)"
}

# A loader-alone run's rows into results.csv: LOADER FILE (a JSON array, as
# shardkit-bench writes, or an object a line, as pytorch_loader.py does).
# Fails, adding nothing, where the file has no rows.
alone_rows() {
  local rows w ips
  rows=$("$PY" - "$2" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
try:
    rows = json.loads(text)
except ValueError:
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
for r in rows:
    print(r["workers"], r["images_per_sec"])
EOF
  ) && [ -n "$rows" ] || return 1
  while read -r w ips; do
    printf -- '-,-,%s,%s,%.1f,0,,\n' "$1" "$w" "$ips" >>"$OUT_DIR/results.csv"
  done <<<"$rows"
}

# examples/train_imagenet.py with one loader: ARCH AMP LOADER DATA WORKERS ROW_NAME PORT_BASE.
example() {
  local log=$OUT_DIR/${1}_${2}_example_${3}_w$5 amp=()
  [ "$2" != off ] && amp=(--amp-dtype "$2")
  echo "-- $1 $2 examples/train_imagenet.py --loader $3 workers=$5"
  timeout "$RUN_TIMEOUT" env PYTHONPATH="$build/python" MASTER_PORT=$(($7 + $5)) "$PY" examples/train_imagenet.py --loader "$3" \
    --data "$4" --arch "$1" --batch-size "$batch" --image-size "$size" --workers "$5" "${amp[@]}" \
    --epochs "$EPOCHS" --print-every 1000000 --json "$log.json" >"$log.log" 2>&1
  bench_row "$1" "$2" "$6" "$5" "$log.json" last_epoch_images_per_s last_epoch_data_wait_fraction
}

run() {
  while [ $# -gt 0 ]; do
    case $1 in --out | --epochs | --workers) [ $# -ge 2 ] || die "$1 needs a value" ;; esac
    case $1 in
      --cpu) CPU=1 ;;
      --tests-only) TESTS_ONLY=1 ;;
      --out) OUT_DIR=$2; shift ;;
      --epochs) EPOCHS=$2; shift ;;
      --workers) WORKERS=$2; shift ;;
      *) die "unknown argument '$1' (run [--cpu] [--tests-only] [--out DIR] [--epochs N] [--workers LIST])" ;;
    esac
    shift
  done
  [ -d "$DEPS/root/usr" ] || die ".deps/root is missing: run 'scripts/gpu_kit.sh fetch' on Debian first"
  # The first epoch is start-up: a row is a later one.
  [[ $EPOCHS =~ ^[0-9]{1,6}$ ]] && [ "$EPOCHS" -ge 2 ] || die "--epochs must be a whole number, at least 2"
  [[ -z $WORKERS || $WORKERS =~ ^[1-9][0-9]{0,3}(,[1-9][0-9]{0,3})*$ ]] ||
    die "--workers must be a comma-separated list of worker counts (1-9999), e.g. 1,2,4"
  local t
  for t in RUN_TIMEOUT TEST_TIMEOUT; do
    [[ ${!t} =~ ^[1-9][0-9]{0,5}$ ]] || die "GPU_KIT_$t must be a whole number of seconds, not '${!t}'"
  done
  mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"
  : >"$OUT_DIR/results.csv"
  PY=$(find_python)
  [ -n "$PY" ] || die "no python3 that imports torch (set PYTHON=...)"
  local t0=$SECONDS build=$ROOT/build-gpu device batch size per_class archs amps
  if [ "$CPU" = 1 ]; then
    build=$ROOT/build-gpukit-cpu device=cpu batch=8 size=32 per_class=6
    archs=(resnet18) amps=(off) WORKERS=${WORKERS:-1,2}
  else
    device=cuda batch=256 size=224 per_class=400
    archs=(resnet50 resnet18) amps=(bf16 fp16) WORKERS=${WORKERS:-1,2,4,8,15}
  fi
  {
    echo "device: $("$PY" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')")"
    echo "torch: $("$PY" -c "import torch; print(torch.__version__, 'cuda', torch.version.cuda)")"
    echo "python: $("$PY" --version 2>&1) at $(command -v "$PY")"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "cpus: $(nproc)"
  } | tee "$OUT_DIR/machine.txt"

  echo "== configure and build ($build)"
  if ! configure_and_build "$build" "$PY"; then
    note_missing "configure or build (see configure.log, build.log)"
    finish "$t0"
    return 2
  fi
  echo "== CUDA tests (skipped without a GPU), collectives and device choice"
  cuda_tests "$build"
  if [ "$TESTS_ONLY" = 1 ]; then
    finish "$t0"
    [ ${#MISSING[@]} -eq 0 ]
    return
  fi

  echo "== a real-photo JPEG set, packed"
  local work=$OUT_DIR/work
  [ "$CPU" = 1 ] || work=${TMPDIR:-/tmp}/shardkit_gpu_kit
  rm -rf "$work" && mkdir -p "$work"
  if ! "$PY" bench/make_jpeg_set.py "$work/jpeg" --sources "$DEPS/photos" --per-class "$per_class" \
    >"$OUT_DIR/pack.log" 2>&1 ||
    ! "$build/tools/pack/shardkit-pack" imagenet "$work/jpeg" "$work/shards" >>"$OUT_DIR/pack.log" 2>&1; then
    note_missing "make and pack the JPEG set (see pack.log)"
    finish "$t0"
    return 2
  fi
  tail -n 2 "$OUT_DIR/pack.log"

  # As many synthetic steps an epoch as the packed set has (the trainer
  # drops the last partial batch).
  local records steps_per_epoch
  records=$("$build/tools/pack/shardkit-pack" inspect "$work/shards" --json |
    "$PY" -c "import json, sys; print(json.load(sys.stdin)['records'])") || records=0
  steps_per_epoch=$(( records / batch ))
  [ "$steps_per_epoch" -ge 1 ] || steps_per_epoch=1
  echo "model,amp,loader,workers,images_per_s,data_wait_fraction,epoch_start_s,loader_busy" \
    >"$OUT_DIR/results.csv"
  loaders_alone "$build" "$work/shards" "$work/jpeg"
  local arch amp w flags log
  for arch in "${archs[@]}"; do
    for amp in "${amps[@]}"; do
      [ "$arch" = resnet18 ] && [ "$amp" = fp16 ] && continue  # ResNet-18 in bf16 only
      flags="--arch $arch --batch-size $batch --size $size --device $device --quiet --epochs $EPOCHS"
      [ "$amp" != off ] && flags+=" --amp --amp-dtype $amp"
      log=$OUT_DIR/${arch}_${amp}_synthetic
      echo "-- $arch $amp synthetic"
      timeout "$RUN_TIMEOUT" "$build/train/shardkit-train" $flags --synthetic --synthetic-steps "$steps_per_epoch" \
        --workers 1 >"$log.json" 2>"$log.log"
      bench_row "$arch" "$amp" synthetic 0 "$log.json" images_per_sec data_wait_fraction
      for w in ${WORKERS//,/ }; do
        log=$OUT_DIR/${arch}_${amp}_train_w$w
        echo "-- $arch $amp shardkit-train workers=$w"
        timeout "$RUN_TIMEOUT" "$build/train/shardkit-train" $flags --data "$work/shards" --workers "$w" \
          >"$log.json" 2>"$log.log"
        bench_row "$arch" "$amp" shardkit-train "$w" "$log.json" images_per_sec data_wait_fraction \
          epoch_start_seconds loader_busy_fraction
      done
      [ "$amp" = fp16 ] && continue  # the Python rows in one precision (bf16: no loss scaling)
      for w in ${WORKERS//,/ }; do
        example "$arch" "$amp" pytorch "$work/jpeg" "$w" DataLoader 29600
        example "$arch" "$amp" shardkit "$work/shards" "$w" "shardkit (Python)" 29700
      done
    done
  done
  [ "$CPU" = 1 ] || rm -rf "$work"
  finish "$t0"
  [ ${#MISSING[@]} -eq 0 ]
}

# The CUDA tests, bounded: a collective that never completes must not take
# the machine. A crash runs them again under a debugger for its backtrace
# (GPU time is scarce: one run should say where).
cuda_tests() {
  local build=$1 rc gdb
  local filter='CudaTest.*:LossScaleTest.*:DistEnvTest.*:FeederTest.*:TrainTest.EveryCollective*:TrainTest.Synthetic*'
  # Which libraries the tests load, in order (libstdc++ must come first).
  { readelf -d "$build/tests/train_test" 2>/dev/null | grep NEEDED; } >>"$OUT_DIR/dependencies.txt"
  timeout "$TEST_TIMEOUT" "$build/tests/train_test" --gtest_filter="$filter" >"$OUT_DIR/cuda_tests.log" 2>&1
  rc=$?
  tail -n 4 "$OUT_DIR/cuda_tests.log"
  [ "$rc" -eq 0 ] && return 0
  note_missing "pass every CUDA test (exit $rc; see cuda_tests.log)"
  [ "$rc" -gt 128 ] && [ "$rc" -ne 137 ] || return 1  # a signal, not the timeout's kill
  gdb=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null) || return 1
  [ -n "$gdb" ] || return 1
  timeout "$TEST_TIMEOUT" "$gdb" -batch -ex run -ex bt -ex 'x/8a $sp' -ex 'info sharedlibrary' \
    --args "$build/tests/train_test" --gtest_filter="$filter" >"$OUT_DIR/cuda_tests_backtrace.log" 2>&1
  grep -A14 -m1 '^#0 ' "$OUT_DIR/cuda_tests_backtrace.log"
  return 1
}

# The table (each row against the same model's synthetic rate) and what failed.
finish() {
  local t0=$1
  if [ -s "$OUT_DIR/results.csv" ]; then
    "$PY" - "$OUT_DIR/results.csv" "$OUT_DIR/machine.txt" >"$OUT_DIR/gpu_results.md" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("# GPU check\n")
print("```\n" + open(sys.argv[2]).read().strip() + "\n```\n")
ceiling = {(r["model"], r["amp"]): float(r["images_per_s"]) for r in rows if r["loader"] == "synthetic"}
alone = [r for r in rows if r["model"] == "-"]
rows = [r for r in rows if r["model"] != "-"]
if alone:
    # What the cores decode with no model and no GPU: the most any row below can get.
    by = {}
    for r in alone:
        by.setdefault(int(r["workers"]), {})[r["loader"]] = float(r["images_per_s"])
    print("The loaders alone (train transform, no model, no GPU):\n")
    print("| workers | shardkit loader images/s | DataLoader images/s | shardkit / DataLoader |")
    print("|---:|---:|---:|---:|")
    for w in sorted(by):
        s, d = by[w].get("shardkit loader alone"), by[w].get("DataLoader alone")
        print("| %d | %s | %s | %s |" % (w, "%.0f" % s if s else "-", "%.0f" % d if d else "-",
                                         "%.2f" % (s / d) if s and d else "-"))
    print()
# loader busy: shardkit-train's workers' decode time over their capacity
# (near 1: the cores are the bound; low with a large wait: something else).
print("| model | amp | loader | workers | images/s | of synthetic | data wait | epoch start | loader busy |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    c = ceiling.get((r["model"], r["amp"])) or ceiling.get((r["model"], "bf16"))
    ips = float(r["images_per_s"])
    start = r.get("epoch_start_s") or ""
    busy = r.get("loader_busy") or ""
    print("| %s | %s | %s | %s | %.0f | %s | %.0f%% | %s | %s |" % (
        r["model"], r["amp"], r["loader"], r["workers"] if r["loader"] != "synthetic" else "-", ips,
        "%.2f" % (ips / c) if c else "-", 100 * float(r["data_wait_fraction"]),
        "%.3f s" % float(start) if start else "-", "%.0f%%" % (100 * float(busy)) if busy else "-"))
# Loader cores needed for 97% of the synthetic rate.
print("\n| model | amp | loader | workers for 97% of synthetic |\n|---|---|---|---|")
for key, c in ceiling.items():
    for loader in ("shardkit-train", "DataLoader", "shardkit (Python)"):
        ok = [int(r["workers"]) for r in rows if (r["model"], r["amp"]) == key and r["loader"] == loader
              and float(r["images_per_s"]) >= 0.97 * c]
        seen = [r for r in rows if (r["model"], r["amp"]) == key and r["loader"] == loader]
        if seen:
            print("| %s | %s | %s | %s |" % (key[0], key[1], loader, min(ok) if ok else "more than tried"))
EOF
    cat "$OUT_DIR/gpu_results.md"
  fi
  echo "gpu_kit: done in $((SECONDS - t0)) s; results in $OUT_DIR"
  if [ ${#MISSING[@]} -gt 0 ]; then
    echo "gpu_kit: could not do ${#MISSING[@]} thing(s):"
    printf '  - %s\n' "${MISSING[@]}"
  fi
}

case ${1:-} in
  fetch) fetch ;;
  run) shift; run "$@" ;;
  *) echo "usage: scripts/gpu_kit.sh fetch | run [--cpu] [--tests-only] [--out DIR] [--epochs N] [--workers LIST]" >&2; exit 2 ;;
esac
