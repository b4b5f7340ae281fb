#!/usr/bin/env bash
# Installs, from Debian 12's packages, whatever shardplan needs to build and test that is not there yet.
set -euo pipefail
packages=(cmake g++ make libcli11-dev libfmt-dev libyaml-cpp-dev libeigen3-dev doctest-dev nlohmann-json3-dev
          libopenmpi-dev openmpi-bin clang libclang-rt-14-dev chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
