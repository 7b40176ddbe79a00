#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for
# SECONDS (default 60), starting from the checked-in seed corpus. Prints, per
# target, the inputs executed and whether it ran clean; a crash leaves its
# input in build-fuzz/crashes/TARGET/ (copy it to tests/fuzz/regressions/TARGET/
# and fix the bug: fuzz_regression_test replays it from then on).
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(shard_reader manifest idx jpeg_transform hdf5_import meta_mat mat archive val_labels cli)
source scripts/deps.sh
shardkit_install_deps clang libclang-rt-14-dev
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSHARDKIT_FUZZ=ON -DSHARDKIT_ASSERTIONS=ON -DSHARDKIT_WITH_TORCH=OFF -DSHARDKIT_WITH_PYTHON=OFF > /dev/null
cmake --build build-fuzz -j"$(nproc)" --target $(printf 'fuzz_%s ' "${TARGETS[@]}") > build-fuzz/build.log 2>&1 || {
  tail -n 40 build-fuzz/build.log; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
status=0
printf '| target | seconds | inputs executed | result |\n|---|---:|---:|---|\n' > build-fuzz/summary.md
for t in "${TARGETS[@]}"; do
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/crashes/$t"
  log=build-fuzz/$t.log
  set +e
  quiet=()
  [ "$t" = cli ] && quiet=(-close_fd_mask=3)  # the tools' own messages; libFuzzer's report stays
  "build-fuzz/tests/fuzz/fuzz_$t" "${quiet[@]}" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -artifact_prefix="build-fuzz/crashes/$t/" -print_final_stats=1 \
    "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" > "$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  if [ $rc -eq 0 ]; then result=clean; else result="CRASH (see $log, build-fuzz/crashes/$t/)"; status=1; fi
  printf '| %s | %s | %s | %s |\n' "$t" "$SECONDS_EACH" "$runs" "$result" | tee -a build-fuzz/summary.md
done
[ $status -eq 0 ] || { echo "fuzz: a target crashed"; grep -h -A12 "ERROR:" build-fuzz/*.log | head -60; }
exit $status
