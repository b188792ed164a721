#!/usr/bin/env bash
# Installs the Debian packages the build needs, only those missing (quick when all are there).
# Usage: scripts/install_system_deps.sh [extra packages...]
set -euo pipefail
packages=(g++ libgtest-dev nlohmann-json3-dev libdnnl-dev pkgconf "$@")  # pkgconf: the C++ package test
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing Debian packages: ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
