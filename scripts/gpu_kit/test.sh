# shellcheck shell=bash
# Step test of scripts/gpu_kit.sh (sourced by it, which sets ROOT, DEPS, KIT, OUT_DIR,
# CPU, and the helpers of common.sh).
# The CUDA tests, bounded: a collective that never completes must not take
# the machine. A crash runs them again under a debugger for its backtrace
# (GPU time is scarce: one run should say where).
cuda_tests() {
  local build=$1 rc gdb
  local filter='CudaTest.*:LossScaleTest.*:DistEnvTest.*:FeederTest.*:TrainTest.EveryCollective*:TrainTest.Synthetic*'
  # Which libraries the tests load, in order (libstdc++ must come first).
  { readelf -d "$build/tests/train/train_test" 2>/dev/null | grep NEEDED; } >>"$OUT_DIR/dependencies.txt"
  timeout "$TEST_TIMEOUT" "$build/tests/train/train_test" --gtest_filter="$filter" >"$OUT_DIR/cuda_tests.log" 2>&1
  rc=$?
  tail -n 4 "$OUT_DIR/cuda_tests.log"
  [ "$rc" -eq 0 ] && return 0
  note_missing "pass every CUDA test (exit $rc; see cuda_tests.log)"
  [ "$rc" -gt 128 ] && [ "$rc" -ne 137 ] || return 1  # a signal, not the timeout's kill
  gdb=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null) || return 1
  [ -n "$gdb" ] || return 1
  timeout "$TEST_TIMEOUT" "$gdb" -batch -ex run -ex bt -ex 'x/8a $sp' -ex 'info sharedlibrary' \
    --args "$build/tests/train/train_test" --gtest_filter="$filter" >"$OUT_DIR/cuda_tests_backtrace.log" 2>&1
  grep -A14 -m1 '^#0 ' "$OUT_DIR/cuda_tests_backtrace.log"
  return 1
}

