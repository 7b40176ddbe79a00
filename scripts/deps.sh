# Sourced by scripts/test.sh and scripts/demo.sh: installs the Debian 12
# packages shardkit needs, only those that are missing.
# Usage: shardkit_install_deps [extra packages...]

SHARDKIT_DEPS=(
  build-essential cmake pkg-config
  libzstd-dev zstd libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev
  libhdf5-dev libmatio-dev libcli11-dev libgtest-dev nlohmann-json3-dev
  libtorch-dev libgloo-dev
  dataset-fashion-mnist
  slurm-wlm munge procps
  radosgw ceph-mon ceph-osd nginx-light openssl python3-boto3
  libcurl4-openssl-dev libssl-dev
  libarchive-dev libarchive-tools zip unzip tar gzip xz-utils bzip2 util-linux
  python3 python3-dev python3-venv python3-pip python3-setuptools python3-wheel
  pybind11-dev python3-torch python3-torchvision python3-numpy python3-pil python3-pytest
  mate-backgrounds python3-skimage python3-scipy python3-h5py
)

shardkit_install_deps() {
  local want=("${SHARDKIT_DEPS[@]}" "$@") missing=() p
  for p in "${want[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "installing: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

shardkit_build() {
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$dir" -j"$(nproc)"
}

# The build folder the demo and the test command share (build/), configured
# the same way by both (assertions on), so that one reuses what the other
# compiled; then only TARGETS (none: everything).
shardkit_build_main() {  # [TARGET...]
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSHARDKIT_ASSERTIONS=ON >/dev/null
  if [ $# -gt 0 ]; then
    cmake --build build -j"$(nproc)" --target "$@"
  else
    cmake --build build -j"$(nproc)"
  fi
}
