#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), builds, and runs every test:
#  1. the full suite (GoogleTest units, CLI tests, training/DDP tests, the Python
#     tests, the SLURM integration test on a real 2-node SLURM when run as root),
#     then the GPU kit's steps on this CPU over the same build;
#  2. the loader's tests under ThreadSanitizer;
#  3. each fuzz target for a few seconds (FUZZ_SECONDS, default 5), and
#  4. every non-training test under AddressSanitizer + UndefinedBehaviorSanitizer,
#     both from one clang build (build-fuzz);
# 1, 2 and 4 with assert() on (SHARDKIT_ASSERTIONS: optimised, without NDEBUG),
# so that what an assertion checks is checked by every suite run (the Python
# binding included: stage 1 builds it).
# after checking that the C++ sources are formatted as .clang-format says, that
# modules include only the modules below them (scripts/check_layers.sh) and that
# no function outside tests/ is over 120 lines (scripts/check_function_length.py).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
shardkit_install_deps clang libclang-rt-14-dev clang-format
jobs=$(nproc)

echo "== format (clang-format 14, .clang-format)"
if git rev-parse --git-dir > /dev/null 2>&1; then
  sources=$(git ls-files '*.cc' '*.h')
else
  sources=$(find . \( -path './build*' -o -path ./out \) -prune -o \( -name '*.cc' -o -name '*.h' \) -print)
fi
clang-format --dry-run --Werror $sources || {
  echo "format: run 'clang-format -i' on the files above"; exit 1; }

echo "== module layers"
if git rev-parse --git-dir > /dev/null 2>&1; then scripts/check_layers.sh; fi

echo "== function length (at most 120 lines outside tests/)"
python3 scripts/check_function_length.py --max-lines 120 $(grep -v '^\./tests/\|^tests/' <<< "$sources")

echo "== build and test"
shardkit_build_main
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== the GPU kit's steps on this CPU, with tiny sizes, on the suite's build (nothing compiled again)"
scripts/gpu_kit.sh run --cpu --build build --out build/gpu-kit-cpu

echo "== ThreadSanitizer: loader threads, prefetch ring, block cache, node cache"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDKIT_SANITIZE=thread -DSHARDKIT_ASSERTIONS=ON \
  -DSHARDKIT_WITH_TORCH=OFF -DSHARDKIT_WITH_PYTHON=OFF > /dev/null
cmake --build build-tsan -j"$jobs" --target loader_test prefetch_ring_test block_cache_test read_queue_test worker_team_test \
  batch_filler_test read_planner_test storage_test elastic_resume_test shared_index_test node_cache_test > /dev/null
TSAN_OPTIONS="halt_on_error=1" ctest --test-dir build-tsan \
  -R '^(LoaderTest|JpegLoaderTest|PrefetchRingTest|BlockCacheTest|ReadQueueTest|WorkerTeamTest|BatchFillerTest|ReadPlannerTest|StorageTest|SharedIndexTest|NodeCacheTest|[A-Za-z]*/?ElasticResumeTest)\.' \
  --output-on-failure -j"$jobs"

echo "== fuzz smoke (${FUZZ_SECONDS:-5} s per target), then every non-training test, from one clang"
echo "   AddressSanitizer + UndefinedBehaviorSanitizer build (build-fuzz: the project compiled once for both)"
scripts/fuzz.sh "${FUZZ_SECONDS:-5}"
cmake --build build-fuzz -j"$jobs" > /dev/null
ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  ctest --test-dir build-fuzz --output-on-failure -j"$jobs"
