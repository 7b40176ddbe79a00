#!/usr/bin/env bash
# Installing shardkit as its users do, checked end to end:
#  1. `pip install --no-build-isolation .` into a fresh venv
#     (python3 -m venv --system-site-packages: Debian's torch, no index),
#     reusing the suite's CMake build (-C build-dir=BUILD);
#  2. `import shardkit` from another directory finds the venv's copy, with the
#     one version number; the tools are on the venv's PATH and say it too;
#  3. examples/train_imagenet.py runs a few steps on shards packed by the
#     installed shardkit-pack;
#  4. `pip wheel .` makes a wheel that installs into a second venv;
#  5. `cmake --install BUILD --component dev` into a prefix holds exactly the
#     public headers (cmake/public_headers.txt), each compiling on its own,
#     and a C++ project outside the tree builds against it with
#     find_package(shardkit CONFIG REQUIRED COMPONENTS ingest train), reads
#     the dataset, packs one with shardkit::ingest and trains two steps with
#     shardkit::train.
# usage: install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
version=$(sed -n 's/^project(shardkit VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || fail "no version in CMakeLists.txt"

echo "== 1. pip install into a fresh venv"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-index --config-settings "build-dir=$build" "$src" ||
  fail "pip install"

echo "== 2. import from elsewhere; tools on PATH; one version"
cd "$tmp"
where=$("$tmp/venv/bin/python" -c "import shardkit; print(shardkit.__file__)")
case $where in "$tmp/venv/"*) ;; *) fail "import shardkit found $where, not the venv's copy" ;; esac
got=$("$tmp/venv/bin/python" -c "import shardkit; print(shardkit.__version__)")
[ "$got" = "$version" ] || fail "shardkit.__version__ is '$got', CMake says '$version'"
for tool in shardkit-pack shardkit-bench shardkit-report shardkit-augment shardkit-train; do
  [ -x "$tmp/venv/bin/$tool" ] || fail "$tool is not on the venv's PATH"
  out=$(PATH="$tmp/venv/bin:/usr/bin:/bin" "$tool" --version) || fail "$tool --version"
  [ "$out" = "$tool $version" ] || fail "$tool --version says '$out'"
done
rc=0
PATH="$tmp/venv/bin:/usr/bin:/bin" shardkit-pack verify "$tmp/nowhere" 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "shardkit-pack's exit code does not come through the entry point (got $rc, want 2)"

echo "== 3. the example script, on shards packed by the installed tool"
/usr/bin/python3 "$src/scripts/make_jpeg_set.py" "$tmp/jpeg" --per-class 4 >/dev/null
PATH="$tmp/venv/bin:/usr/bin:/bin" shardkit-pack imagenet "$tmp/jpeg" "$tmp/shards" >/dev/null 2>&1 ||
  fail "shardkit-pack imagenet"
grep -q "\"version\": *\"$version\"" "$tmp/shards/manifest.json" || fail "the manifest's created_by lacks version $version"
MASTER_PORT=$((20000 + RANDOM % 12000)) "$tmp/venv/bin/python" "$src/examples/train_imagenet.py" --loader shardkit \
  --data "$tmp/shards" --arch resnet18 --batch-size 4 --image-size 32 --workers 1 --max-steps 3 \
  --epochs 1 --json "$tmp/example.json" >"$tmp/example.log" 2>&1 || { cat "$tmp/example.log"; fail "example script"; }
grep -q '"steps": 3' "$tmp/example.json" || fail "the example did not run 3 steps: $(cat "$tmp/example.json")"

echo "== 4. pip wheel, installed into another venv"
"$tmp/venv/bin/python" -m pip wheel -q --no-build-isolation --no-index --no-deps --config-settings "build-dir=$build" \
  -w "$tmp/wheels" "$src" || fail "pip wheel"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv2"
"$tmp/venv2/bin/python" -m pip install -q --no-index "$tmp"/wheels/shardkit-"$version"-*.whl || fail "install the wheel"
n=$("$tmp/venv2/bin/python" -c "import shardkit, sys; print(len(shardkit.Dataset(sys.argv[1])))" "$tmp/shards")
[ "$n" -gt 0 ] || fail "the wheel's shardkit read $n records"
"$tmp/venv2/bin/shardkit-pack" verify "$tmp/shards" >/dev/null || fail "the wheel's shardkit-pack verify"

echo "== 5. cmake --install, and find_package(shardkit) from another project"
cmake --install "$build" --prefix "$tmp/prefix" --component dev >/dev/null || fail "cmake --install"
[ -f "$tmp/prefix/lib/cmake/shardkit/shardkitConfig.cmake" ] || [ -f "$tmp/prefix/lib64/cmake/shardkit/shardkitConfig.cmake" ] ||
  fail "no shardkitConfig.cmake in the prefix"
inc=$tmp/prefix/include/shardkit
[ "$(cd "$inc/loader" && ls | tr '\n' ' ')" = "batch.h loader.h loader_state.h options.h resolution_schedule.h " ] ||
  fail "installed loader headers: $(ls "$inc/loader" | tr '\n' ' ') (only the public ones belong there)"
# What is installed is the API, cmake/public_headers.txt, and nothing else.
want=$(grep -E '^[a-z]' "$src/cmake/public_headers.txt" | sort)
got=$(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | sort)
[ "$want" = "$got" ] || fail "installed headers differ from cmake/public_headers.txt (<: listed, >: installed):" \
  "$(diff <(echo "$want") <(echo "$got") | grep '^[<>]' | tr '\n' ' ')"
# Every installed header compiles on its own, from the prefix alone (train's
# need LibTorch's headers: the consumer compiles them with shardkit::train's
# usage requirements).
for h in $(cd "$inc" && find . -name '*.h' -not -path './train/*' | sort); do
  echo "#include \"${h#./}\"" | c++ -std=c++17 -fsyntax-only -DSHARDKIT_VERSION="\"$version\"" -I"$inc" -x c++ - 2>"$tmp/header.log" ||
    { cat "$tmp/header.log"; fail "installed header ${h#./} does not compile alone"; }
done
# The components too: shardkit::ingest and shardkit::train with their
# dependencies found by shardkitConfig.cmake (LibTorch where this build found it).
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")
cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCONSUMER_COMPONENTS="ingest;train" ${torch_dir:+-DTorch_DIR="$torch_dir"} >"$tmp/consumer.log" 2>&1 ||
  { cat "$tmp/consumer.log"; fail "configure the consumer"; }
cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; fail "build the consumer"; }
out=$("$tmp/consumer/consumer" "$tmp/shards") || fail "run the consumer"
records=$("$tmp/venv/bin/python" -c "import shardkit, sys; print(len(shardkit.Dataset(sys.argv[1])))" "$tmp/shards")
case $out in "shardkit $version: $records records"*) ;; *) fail "the consumer printed '$out'" ;; esac
echo "$out"
# 40 8x8 gray images, labels 0..9 four times (label sum 180), as MNIST-style IDX,
# packed by the installed ingest library and read by the installed loader.
/usr/bin/python3 - "$tmp" <<'EOF'
import struct, sys
n = 40
with open(sys.argv[1] + "/images.idx", "wb") as f:
    f.write(struct.pack(">HBBIII", 0, 8, 3, n, 8, 8) + bytes((i * 3 + j) % 256 for i in range(n) for j in range(64)))
with open(sys.argv[1] + "/labels.idx", "wb") as f:
    f.write(struct.pack(">HBBI", 0, 8, 1, n) + bytes(i % 10 for i in range(n)))
EOF
out=$("$tmp/consumer/ingest_consumer" "$tmp/images.idx" "$tmp/labels.idx" "$tmp/idx") || fail "run ingest_consumer"
[ "$out" = "packed 40 records into 1 shards" ] || fail "ingest_consumer printed '$out'"
out=$("$tmp/consumer/consumer" "$tmp/idx") || fail "run the consumer on ingest_consumer's dataset"
case $out in *": 40 records, 3 batches, label sum 180") ;; *) fail "the consumer printed '$out'" ;; esac
# A train consumer takes the shared libstdc++ first (ahead of LibTorch's
# exported copies of its symbols), found with the consumer's own compiler: no
# path of the machine that built shardkit is in the installed package.
first=$(readelf -d "$tmp/consumer/train_consumer" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | head -n 1)
[ "$first" = libstdc++.so.6 ] || fail "train_consumer's first NEEDED library is '$first', not libstdc++.so.6"
! grep -rq 'libstdc++.so' "$tmp/prefix"/lib*/cmake/shardkit/shardkitTrainTargets*.cmake ||
  fail "the installed train targets name a libstdc++ path of the build machine"
out=$("$tmp/consumer/train_consumer" "$tmp/shards" 2>"$tmp/train.log") || { cat "$tmp/train.log"; fail "run train_consumer"; }
[ "$out" = "trained 2 steps" ] || fail "train_consumer printed '$out'"
echo "install_test: every check passed"
