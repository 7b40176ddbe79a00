# shellcheck shell=bash
# Step bench of scripts/gpu_kit.sh (sourced by it, which sets ROOT, DEPS, KIT, OUT_DIR,
# CPU, and the helpers of common.sh).
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

# The step: a real-photo JPEG set made and packed with BUILD's shardkit-pack,
# the loaders alone, then each model and precision: its synthetic ceiling,
# shardkit-train at each worker count, and the Python example with
# PyTorch's DataLoader and with shardkit. Rows go to OUT_DIR/results.csv.
bench_step() {  # BUILD
  local build=$1
  echo "== a real-photo JPEG set, packed"
  local work=$OUT_DIR/work sources=()
  [ "$CPU" = 1 ] || work=${TMPDIR:-/tmp}/shardkit_gpu_kit
  [ -d "$DEPS/photos" ] && sources=(--sources "$DEPS/photos")  # else Debian's own photographs
  rm -rf "$work" && mkdir -p "$work"
  if ! "$PY" scripts/make_jpeg_set.py "$work/jpeg" "${sources[@]}" --per-class "$per_class" \
    >"$OUT_DIR/pack.log" 2>&1 ||
    ! "$build/tools/pack/shardkit-pack" imagenet "$work/jpeg" "$work/shards" >>"$OUT_DIR/pack.log" 2>&1; then
    note_missing "make and pack the JPEG set (see pack.log)"
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
}
