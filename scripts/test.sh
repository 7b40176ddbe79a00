#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), builds, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
shardkit_install_deps
shardkit_build build
ctest --test-dir build --output-on-failure -j"$(nproc)"
