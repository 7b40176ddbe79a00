# shellcheck shell=bash
# Step report of scripts/gpu_kit.sh (sourced by it): the table (each row of
# OUT_DIR/results.csv against the same model's synthetic rate:
# report.py) into gpu_results.md, and what the steps could not do (every
# step's, from OUT_DIR/missing.txt).
report_step() {  # T0 (the run's start, for its duration)
  local t0=$1 missing=()
  if [ -s "$OUT_DIR/results.csv" ]; then
    "$PY" "$KIT/report.py" "$OUT_DIR/results.csv" "$OUT_DIR/machine.txt" >"$OUT_DIR/gpu_results.md"
    cat "$OUT_DIR/gpu_results.md"
  fi
  echo "gpu_kit: done in $((SECONDS - t0)) s; results in $OUT_DIR"
  [ -s "$OUT_DIR/missing.txt" ] && mapfile -t missing <"$OUT_DIR/missing.txt"
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu_kit: could not do ${#missing[@]} thing(s):"
    printf '  - %s\n' "${missing[@]}"
    return 1
  fi
}
