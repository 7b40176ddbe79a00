# shellcheck shell=bash
# Step build of scripts/gpu_kit.sh (sourced by it, which sets ROOT, DEPS, KIT, OUT_DIR,
# CPU, and the helpers of common.sh).
# Configures CMake against the machine's PyTorch and .deps/ and builds what
# the other steps run. A folder configured by something else (the test
# suite's build/) is taken as it is: its targets are built, nothing else.
configure_and_build() {
  local build=$1 py=$2 prefix="$DEPS/root/usr" args=() keep_going=() pyb
  if [ -f "$build/CMakeCache.txt" ] && [ ! -f "$build/.made_by_gpu_kit" ]; then
    echo "gpu_kit: reusing $build as it is configured"
    build_targets "$build"
    return
  fi
  [ -d "$DEPS/root/usr" ] || die ".deps/root is missing: run 'scripts/gpu_kit.sh fetch' on Debian first"
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
  touch "$build/.made_by_gpu_kit"
  build_targets "$build" "${keep_going[@]}"
}

# What the other steps run (the Python binding: a row of its own is missed
# when it cannot be built). Extra arguments go to the build tool.
build_targets() {  # BUILD [-- TOOL ARGS]
  local build=$1
  shift
  local targets=(shardkit-train shardkit-pack shardkit-bench train_test)
  [ "$TESTS_ONLY" = 1 ] && targets=(shardkit-train train_test)
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" "$@" >"$OUT_DIR/build.log" 2>&1 ||
    return 1
  [ "$TESTS_ONLY" = 1 ] && return 0
  cmake --build "$build" -j"$(nproc)" --target _shardkit >>"$OUT_DIR/build.log" 2>&1 ||
    note_missing "build the Python binding (see build.log)"
}

