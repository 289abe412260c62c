#!/usr/bin/env bash
# The main job in one command, on a fresh Debian machine:
#   installs the Debian packages (apt-get), builds dissect, prepares the Brown corpus
#   (examples/prepare_brown.sh), and trains examples/configs/brown-small.json with
#   `mpirun -np $NP` (default 2) CPU workers. Extra arguments go to `dissect train`.
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
if [ "${SKIP_APT:-0}" != 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends $(cat examples/debian-packages.txt) >/dev/null
  command -v npm >/dev/null || $sudo apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
[ -f build/build.ninja ] || meson setup build
ninja -C build
examples/prepare_brown.sh data/brown
mkdir -p runs
root=(); [ "$(id -u)" -ne 0 ] || root=(--allow-run-as-root)
exec mpirun "${root[@]}" -np "${NP:-2}" build/dissect train --config examples/configs/brown-small.json "$@"
