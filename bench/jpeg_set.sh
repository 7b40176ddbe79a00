# Sourced by the JPEG benchmarks (from the repository root): the ImageNet-shaped
# set they measure on, cut from real photographs by scripts/make_jpeg_set.py and
# packed with build/'s shardkit-pack, made once and reused by later runs.
#
# bench_jpeg_shards TREE SHARDS PER_CLASS: unless SHARDS holds a finished dataset
# (its manifest), makes TREE with PER_CLASS images a class and packs it into SHARDS.
bench_jpeg_shards() {
  local tree=$1 shards=$2 per_class=$3
  [ -f "$shards/manifest.json" ] && return 0
  /usr/bin/python3 scripts/make_jpeg_set.py "$tree" --per-class "$per_class"
  build/tools/pack/shardkit-pack imagenet "$tree" "$shards" --force > /dev/null
}
