#!/usr/bin/env bash
# What a node's ranks pay to start reading a large dataset (issue 34): RANKS
# processes at once, each one rank of RANKS, open the dataset and take one
# batch of 512; per rank: open time, time to the first batch, and memory while
# all of them are alive: Anon (private anonymous memory: heap, the block
# cache; what the rank costs the node), USS (private pages, Anon plus file
# pages of the mapped shards that no other rank maps right now: page cache,
# which the kernel drops when it needs the memory), RSS and PSS. Cold (the page cache emptied of the dataset first) and warm, for each
# shuffle mode. With OLD_BUILD, the same probe built against another build's
# libraries runs beside, in the same run, for a side-by-side ratio.
#
#   [SHUFFLES="none block full"] bench/open_scale.sh DATASET [RANKS] [OLD_SRC_DIR]
#     OLD_SRC_DIR: a source tree with a build/ of another commit
#       (bench/compare_commits.sh leaves one in out/commits/SHA)
# Needs root for --cold (posix_fadvise DONTNEED works for any reader, but the
# numbers mean "cold" only if nothing else holds the pages).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DS=${1:?usage: bench/open_scale.sh DATASET [RANKS] [OLD_SRC_DIR]}
RANKS=${2:-4}
OLD=${3:-}
OUT=$(mktemp -d /tmp/open-scale-XXXXXX)
trap 'rm -rf "$OUT"' EXIT

# The libraries a build of SRC_DIR has (their set changed over time: an older
# commit's base/ held storage), as one group the linker resolves in any order.
build_libs() {  # build_dir
  local l
  for l in loader/libshardkit_loader image/libshardkit_image shard/libshardkit_shard \
    storage/libshardkit_storage storage/remote/libshardkit_storage_remote \
    storage/libshardkit_storage_local base/libshardkit_base; do
    [ -f "$1/$l.a" ] && echo "$1/$l.a"
  done
}
build_probe() {  # src_dir out
  local s=$1
  # shellcheck disable=SC2046
  g++ -std=c++17 -O2 -fopenmp -I"$s" -I"$s/build" "$ROOT/bench/open_probe.cc" \
    -Wl,--start-group $(build_libs "$s/build") -Wl,--end-group \
    -lzstd -lturbojpeg -ljpeg -lpng -lcurl -lcrypto -lpthread -o "$2"
}
build_probe "$ROOT" "$OUT/probe-new"
probes=(new)
if [ -n "$OLD" ]; then build_probe "$OLD" "$OUT/probe-old"; probes+=(old); fi

kb() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/smaps_rollup"; }
records=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]+"/manifest.json")); print(sum(s["records"] for s in m["shards"]), len(m["shards"]))' "$DS")
echo "dataset $DS: ${records% *} records in ${records#* } shards; $RANKS ranks at once, batch 512, 1 worker each"
printf '%-5s %-6s %-5s %9s %9s %9s %9s %9s %9s\n' build shuffle cache open_s first_s "Anon MB" "USS MB" "RSS MB" "PSS MB"
for shuffle in ${SHUFFLES:-none block full}; do
  for cache in cold warm; do
    for p in "${probes[@]}"; do
      pids=() fifos=()
      for r in $(seq 0 $((RANKS - 1))); do
        mkfifo "$OUT/in$r"
        flag=""; [ "$cache" = cold ] && [ "$r" = 0 ] && flag=--cold
        # every rank's stdin is a FIFO this script holds open until it has measured them
        "$OUT/probe-$p" "$DS" --rank "$r" --world "$RANKS" --shuffle "$shuffle" $flag \
          < "$OUT/in$r" > "$OUT/out$r" 2> "$OUT/err$r" &
        pids+=($!)
        exec {fd}> "$OUT/in$r"
        fifos+=("$fd")
        # the cold rank empties the cache before the others start reading
        if [ -n "$flag" ]; then until [ -s "$OUT/out0" ] || ! kill -0 "${pids[0]}" 2>/dev/null; do sleep 0.05; done; fi
      done
      for r in "${!pids[@]}"; do
        until [ -s "$OUT/out$r" ] || ! kill -0 "${pids[$r]}" 2>/dev/null; do sleep 0.05; done
      done
      o=0 f=0 u=0 rs=0 ps=0 an=0
      for r in "${!pids[@]}"; do
        line=$(cat "$OUT/out$r")
        [ -n "$line" ] || { echo "rank $r failed: $(cat "$OUT/err$r")"; exit 1; }
        o=$(awk -v a="$o" -v l="$line" 'BEGIN{split(l,x,/[ =]/); print (x[2]>a?x[2]:a)}')
        f=$(awk -v a="$f" -v l="$line" 'BEGIN{split(l,x,/[ =]/); print (x[4]>a?x[4]:a)}')
        pid=${pids[$r]}
        u=$((u + $(kb "$pid" Private_Clean) + $(kb "$pid" Private_Dirty)))
        rs=$((rs + $(kb "$pid" Rss))); ps=$((ps + $(kb "$pid" Pss))); an=$((an + $(kb "$pid" Anonymous)))
      done
      for fd in "${fifos[@]}"; do exec {fd}>&-; done
      wait "${pids[@]}"
      rm -f "$OUT"/in* "$OUT"/out* "$OUT"/err*
      # the slowest rank's times; memory per rank, averaged
      printf '%-5s %-6s %-5s %9s %9s %9.1f %9.1f %9.1f %9.1f\n' "$p" "$shuffle" "$cache" "$o" "$f" \
        "$(echo "$an / $RANKS / 1024" | bc -l)" "$(echo "$u / $RANKS / 1024" | bc -l)" "$(echo "$rs / $RANKS / 1024" | bc -l)" "$(echo "$ps / $RANKS / 1024" | bc -l)"
    done
  done
done
