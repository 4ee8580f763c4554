#!/usr/bin/env bash
# Installs the Debian packages scanprop needs, only those that are missing.
# Usage: scripts/deps.sh            (as root, or with sudo available)
set -euo pipefail
pkgs=(build-essential pkg-config libopenblas-dev libcriterion-dev zlib1g-dev libstb-dev libdnnl-dev
      python3-torch python3-numpy dataset-fashion-mnist openmpi-bin libopenmpi-dev
      python3-matplotlib   # scripts/plot.py
      clang libclang-rt-dev   # clang builds (make build-clang) and libFuzzer (make fuzz)
      emscripten chromium)    # the teaching page (make site: emcc, node) and its test (make test-site)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: done"
