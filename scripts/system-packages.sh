#!/usr/bin/env bash
# The Debian packages the native backends build against (a fresh machine has none of them):
#   ember-xnnpack: libxnnpack-dev libpthreadpool-dev
#   ember-vulkan:  libvulkan-dev glslang-tools spirv-tools, and Mesa's lavapipe (a Vulkan device on
#                  the CPU) with vulkan-tools for tests and CI: mesa-vulkan-drivers vulkan-tools
#   ember-rocm:    hipcc libamdhip64-dev rocm-device-libs (Debian's ROCm 5.2: builds its code objects, and
#                  its decline path is tested against the real libamdhip64)
# ember-cpu needs nothing from the system (OpenBLAS comes from PyPI).
set -euo pipefail

PACKAGES=(libxnnpack-dev libpthreadpool-dev libvulkan-dev glslang-tools spirv-tools mesa-vulkan-drivers vulkan-tools
          hipcc libamdhip64-dev rocm-device-libs)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install these Debian/Ubuntu packages (or your distribution's equivalents): ${missing[*]}" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
