#!/usr/bin/env bash
# A loader-only build needs only the library's own dependencies: zstd,
# libjpeg-turbo and nlohmann-json (header-only: shard/'s manifest); libpng
# only where PNGs are packed (ingest/) or tested. Checked end to end:
#  1. configure a fresh build with the tools, ingest, tests, LibTorch and the
#     Python binding off, and every other dependency hidden from CMake
#     (CMAKE_DISABLE_FIND_PACKAGE_<name>: a find_package of it fails or finds
#     nothing, as on a machine without it);
#  2. build shardkit_loader, and install the dev component into a prefix;
#  3. build the C++ consumer of tests/install against that prefix with the
#     same packages hidden, and read a dataset with it.
# usage: loader_only_build.sh SHARDKIT_PACK   (the full build's, to pack the dataset)
# CMAKE_BUILD_PARALLEL_LEVEL sets the build's jobs (default: every core).
set -euo pipefail
pack=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "loader_only_build: FAIL: $*" >&2; exit 1; }
jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
hidden=()
for p in HDF5 CLI11 LibArchive OpenMP GTest Torch pybind11 Python3 PNG ZLIB; do
  hidden+=("-DCMAKE_DISABLE_FIND_PACKAGE_$p=ON")
done

echo "== 1. configure with the tools, ingest, tests, LibTorch and Python off; ${hidden[*]}"
cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Debug -DSHARDKIT_BUILD_TOOLS=OFF -DSHARDKIT_BUILD_INGEST=OFF \
  -DSHARDKIT_BUILD_TESTS=OFF -DSHARDKIT_WITH_TORCH=OFF -DSHARDKIT_WITH_PYTHON=OFF "${hidden[@]}" \
  >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configure"; }

echo "== 2. build shardkit_loader; install the dev component"
cmake --build "$tmp/build" -j"$jobs" --target shardkit_loader >"$tmp/build.log" 2>&1 ||
  { tail -n 40 "$tmp/build.log"; fail "build shardkit_loader"; }
for t in shardkit_ingest shardkit-pack shardkit_cli; do
  if cmake --build "$tmp/build" --target "$t" >/dev/null 2>&1; then fail "the loader-only build has target $t"; fi
done
cmake --install "$tmp/build" --prefix "$tmp/prefix" --component dev >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "cmake --install"; }

echo "== 3. a consumer against the prefix reads a dataset"
cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" "${hidden[@]}" \
  >"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; fail "configure the consumer"; }
cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; fail "build the consumer"; }
# 40 8x8 gray images, labels 0..9 four times (label sum 180), as MNIST-style IDX.
python3 - "$tmp" <<'EOF'
import struct, sys
n = 40
with open(sys.argv[1] + "/images.idx", "wb") as f:
    f.write(struct.pack(">HBBIII", 0, 8, 3, n, 8, 8) + bytes((i * 3 + j) % 256 for i in range(n) for j in range(64)))
with open(sys.argv[1] + "/labels.idx", "wb") as f:
    f.write(struct.pack(">HBBI", 0, 8, 1, n) + bytes(i % 10 for i in range(n)))
EOF
"$pack" idx --images "$tmp/images.idx" --labels "$tmp/labels.idx" "$tmp/data" >/dev/null 2>&1 || fail "shardkit-pack idx"
out=$("$tmp/consumer/consumer" "$tmp/data") || fail "run the consumer"
case $out in *": 40 records, 3 batches, label sum 180") ;; *) fail "the consumer printed '$out'" ;; esac
echo "$out"
echo "loader_only_build: every check passed"
