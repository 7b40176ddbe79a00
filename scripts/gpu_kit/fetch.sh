# shellcheck shell=bash
# Step fetch (here, on Debian 12, with apt): the Debian packages the build
# needs, downloaded and unpacked into .deps/root, and real photographs into
# .deps/photos. .deps/ is ignored by git; carry it with the checkout.
# Build dependencies (and the libraries they link) that a CUDA machine with
# a compiler, CMake and PyTorch lacks. libc, libstdc++, libgomp, zlib's
# runtime and libcurl (with its -dev files: object storage) are the
# machine's own: Debian's libcurl, first on LD_LIBRARY_PATH, would need
# Debian's libssh2, libldap, ... there (seen on Ubuntu 24.04).
KIT_PACKAGES=(
  libzstd-dev libzstd1 libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo
  libpng-dev libpng16-16 zlib1g-dev
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libsz2 libaec0 libaec-dev libmatio-dev libmatio11
  libcli11-dev nlohmann-json3-dev libgtest-dev pybind11-dev
)

fetch() {
  command -v apt-get >/dev/null || die "fetch needs apt-get (run it on Debian 12)"
  rm -rf "$DEPS.tmp" && mkdir -p "$DEPS.tmp/debs" "$DEPS.tmp/root" "$DEPS.tmp/photos" || exit 2
  if ! (cd "$DEPS.tmp/debs" && apt-get download "${KIT_PACKAGES[@]}" >/dev/null 2>&1); then
    apt-get update -qq >/dev/null 2>&1  # a machine whose package lists are old or absent
    (cd "$DEPS.tmp/debs" && apt-get download "${KIT_PACKAGES[@]}" >/dev/null) || die "apt-get download failed"
  fi
  for deb in "$DEPS.tmp"/debs/*.deb; do dpkg -x "$deb" "$DEPS.tmp/root" || die "dpkg -x $deb"; done
  # Documentation, tools and static libraries (but GoogleTest's) are not
  # needed to build: shardkit links the shared ones.
  rm -rf "$DEPS.tmp/root/usr/share/doc" "$DEPS.tmp/root/usr/share/man" "$DEPS.tmp/root/usr/bin"
  find "$DEPS.tmp/root" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete
  rm -rf "$DEPS.tmp/debs"
  local photos=(/usr/share/backgrounds/mate/nature/*.jpg)
  [ -e "${photos[0]}" ] || die "no photographs: apt-get install mate-backgrounds"
  cp "${photos[@]}" "$DEPS.tmp/photos/"
  rm -rf "$DEPS" && mv "$DEPS.tmp" "$DEPS"
  echo "gpu_kit: fetched ${#KIT_PACKAGES[@]} packages and ${#photos[@]} photographs into .deps ($(du -sh "$DEPS" | cut -f1))"
}

