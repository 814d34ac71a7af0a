#!/bin/bash
# Build, on your machine, what the GPU scripts carry to the lent H200 machine (Python 3.12, torch
# 2.11.0+cu130 preinstalled, no package registry): a real SGLang 0.5.17 server's packages, small
# enough for one device call, and the wheels eagle3-top itself needs there (msgpack; mcap with
# zstandard and lz4, which the monitor's --once and relay load).
#   usage: benchmarks/gpu/sglang_env/build_carry.sh [WHEEL_CACHE]     (from the repo root)
# Writes build/sglang-h200 (pk/*.tar.xz, one per package of wheels.txt, ~57 MiB, plus setup.sh and
# mkmodels.py) and build/e3t-extra (msgpack, mcap, zstandard, lz4 wheels); both are git-ignored. Then, in one device call
# carrying build/sglang-h200 and build/e3t-extra: bash benchmarks/gpu/run_gpu.sh
# E3T_EXTRA=min: build/e3t-extra holds the msgpack wheel only (what the server-side scripts need,
# run_shapes.sh included): the carry and the working tree must stay under the call's 64 MiB, and
# with mcap, zstandard and lz4 (--once, relay: run_tp_dp.sh) they do not.
# SGLang 0.5.17 is the release whose torch pin (2.11.0) matches the machine's torch; 0.5.18-0.5.21
# pin 2.13, 0.5.22+ 2.14.1. Needs pip reaching PyPI, unzip and xz; downloads ~480 MB once (cached).
# What it drops: sglang-kernel's FA3 library (1.1 GB unpacked; serve with --attention-backend triton)
# and its sm100 / MLA / infllm libraries, xgrammar's static library, and sglang's multimodal_gen and
# test packages: a text-model server on an H200 never loads them (the carry and the tree must stay
# under the device call's 64 MiB).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=build/sglang-h200 extra=build/e3t-extra
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/sglang-h200-wheels}
mkdir -p "$out/pk" "$extra" "$cache"
plat=""
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 \
         manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
  plat="$plat --platform $p"
done
# shellcheck disable=SC2086  # the platform flags are separate words
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  $plat --platform any -d "$cache" -r "$here/wheels.txt"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  $plat -d "$extra" "msgpack>=1.0" "mcap>=1.6" "zstandard>=0.20" "lz4>=4"
[ "${E3T_EXTRA:-full}" = min ] && find "$extra" -name '*.whl' ! -name 'msgpack-*' -delete
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
while IFS= read -r spec; do
  [[ -z $spec || $spec == \#* ]] && continue
  name=${spec%%==*}; ver=${spec#*==}; norm=${name//-/_}
  whl=$(ls "$cache"/"${norm}"-"${ver}"-*.whl 2>/dev/null | head -1)
  [[ -n $whl ]] || { echo "missing wheel for $spec" >&2; exit 1; }
  d=$stage/$norm; rm -rf "$d"; mkdir -p "$d"; unzip -q "$whl" -d "$d"
  case $norm in
    sglang_kernel)  # keep sm90/common_ops (what `import sgl_kernel` loads on an H200)
      rm -rf "$d/sgl_kernel/flash_ops.abi3.so" "$d/sgl_kernel/flashmla_ops.abi3.so" "$d/sgl_kernel/sm100" \
             "$d"/sgl_kernel/infllm_ops*.so ;;
    xgrammar)       # the static library is for building against xgrammar, not for running it
      rm -f "$d/xgrammar/lib/libxgrammar.a" ;;
    sglang)         # diffusion serving and SGLang's own test helpers: a text server never imports them
      rm -rf "$d/sglang/multimodal_gen" "$d/sglang/test" ;;
  esac
  tar -C "$d" -cf - . | xz -9 -T2 > "$out/pk/$norm.tar.xz"
done < "$here/wheels.txt"
cp "$here/setup.sh" "$here/mkmodels.py" "$out/"
du -sh "$out" "$extra"
