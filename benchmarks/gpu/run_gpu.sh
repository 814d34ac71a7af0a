#!/bin/bash
# Everything GPU in one device call (repo root; carry build/sglang-h200 and build/e3t-extra, which
# benchmarks/gpu/sglang_env/build_carry.sh makes on your machine):
#   bash benchmarks/gpu/run_gpu.sh       -> fingerprint and serving-path benchmarks, GPU tests,
#                                           real-server check and tracer on/paused on one server
set -u
OUT=${OUT:-/tmp/e3t-out}; export OUT; mkdir -p "$OUT"; B=$(pwd)/benchmarks/gpu
T0=$(date +%s); export T_START=$T0
bash "$B/install_plugin.sh" || exit 1
export PYTHONPATH=/tmp/site:/tmp/e3t CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 "$B/bench_fingerprint_gpu.py" --json "$OUT/fingerprint_gpu.json" 2>&1 | tee "$OUT/fingerprint_gpu.txt"
echo "== fingerprint bench done at $(( $(date +%s)-T0 )) s"
# the serving thread's cost per verify step, now against the path before (python -m: benchmarks/ is a package)
python3 -m benchmarks.bench_serving_path --profile --json "$OUT/serving_path.json" 2>&1 | tee "$OUT/serving_path.txt"
echo "== serving-path bench done at $(( $(date +%s)-T0 )) s"
if [ "${SWEEP:-1}" = 1 ] && python3 -c "import pytest" 2>/dev/null; then
  (mkdir -p /tmp/tt && cp tests/test_fingerprint.py /tmp/tt/ && cd /tmp/tt && timeout 120 python3 -m pytest -q -p no:cacheprovider test_fingerprint.py 2>&1 | tail -5)
else echo "== no pytest on this machine: GPU tests skipped (bench_fingerprint_gpu.py covers them)"; fi
[ "${SKIP_SERVER:-0}" = 1 ] || bash "$B/run_server_check.sh"
echo "== all done at $(( $(date +%s)-T0 )) s"
