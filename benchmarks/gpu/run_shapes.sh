#!/bin/bash
# The tracer's cost at real model shapes (issue 30), in ONE device call, from the repo root:
#   bash benchmarks/gpu/run_shapes.sh        (carry build/sglang-h200 and build/e3t-extra)
#
# Each phase serves one EAGLE-3 pair with --load-format dummy (random bf16 weights from the configs
# benchmarks/gpu/shapes.py writes: no download, no tokenizer), CUDA graphs on up to batch 64, the
# tracer publishing to a plain pyzmq subscriber (subscriber_check.py, so it really sends), and runs
# ab_overhead.py on that one server: tracer recording (T) against paused (P, EAGLE3_TOP_PAUSE_FILE)
# in ABBA pairs, with SGLang's own decode log per arm. Phases (PHASES, in order; default "L8 WIDE"):
#   L8    Llama-3.1-8B (32 layers) + SpecForge's draft, as published: batch 1, 16, 64
#   WIDE  Kimi-K2 cut to 8 dense layers (DeepSeek-V3 / MLA, hidden 7168) + AQ-MedAI's draft (aux
#         width 21504): batch 64, then 1 if time; if it dies at start, the Llama-architecture
#         wide-llama (same width, 4 layers) instead, said so
#   TINY  run_server_check.sh's tiny pair (mkmodels.py, tied): batch 1, 16, 64
# Each run lasts about RUN_S (2.0) seconds, ntok from a warm-up's tokens/s: ab_overhead.py counts
# SGLang's log only in stamped seconds wholly inside a run (1.25 s at least), so 1 s runs give none.
# DEADLINE_S (540) is counted from T_START (this script's start unless set): phases and batch sizes
# share what is left,
# a phase that could not start a server and measure in its share is skipped and says so.
# Results: $OUT/shapes.tgz (everything: logs, ab_*.json, subscriber events) and $OUT/summary.txt
# (progress and the markdown rows of shapes_report.py), both rewritten after every phase.
# MEM_FRAC (0.6: 80 GB card) is --mem-fraction-static for the real shapes; AB_ROUNDS caps pairs (40).
set -u
R=$(pwd); B=$R/benchmarks/gpu; C=$R/build/sglang-h200
OUT=${OUT:-/tmp/e3t-out}; mkdir -p "$OUT"
W=/tmp/shapes-run; rm -rf "$W"; mkdir -p "$W"
T0=$(date +%s); T_START=${T_START:-$T0}; DEADLINE=$((T_START + ${DEADLINE_S:-540}))
SUM=$OUT/summary.txt; : > "$SUM"
say() { echo "== [$(( $(date +%s) - T0 )) s] $*" | tee -a "$SUM"; }
pack() {  # everything so far, so that a call cut off still brings back what it measured
  python3 "$B/shapes_report.py" "$W"/ab_*.json > "$W/report.md" 2>/dev/null
  cp "$SUM" "$W/summary.txt"; cat "$W/report.md" >> "$W/summary.txt"
  tar -czf "$OUT/shapes.tgz.part" -C "$W" . && mv "$OUT/shapes.tgz.part" "$OUT/shapes.tgz"
}

bash "$B/install_plugin.sh" > "$W/install.log" 2>&1 || { tail -n 30 "$W/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:/tmp/e3t CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$SUM"
python3 -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__)" | tee -a "$SUM"
python3 "$B/shapes.py" /tmp/shapes llama8b kimi-wide wide-llama | tee "$W/shapes.jsonl" || exit 1
say "installed and configs written"

GRAPH="--cuda-graph-backend-decode full --cuda-graph-backend-prefill disabled --cuda-graph-max-bs-decode 64"
SETSID=$(command -v setsid || true)
export EAGLE3_TOP_PAUSE_FILE=$W/pause  # the tracer records nothing while it exists (the P arm)
rm -f "$EAGLE3_TOP_PAUSE_FILE"
serve() {  # TAG TARGET DRAFT PORT MEMFRAC: subscriber first (it hears the hello), then the server
  local T=$1 TD=$2 DD=$3 P=$4 M=$5
  python3 "$B/subscriber_check.py" "$T" "tcp://127.0.0.1:$((P + 2000))" 900 "$W" > "$W/sub_$T.log" 2>&1 &
  echo $! > "$W/subpid_$T"
  # GRAPH is a list of flags: split on purpose
  # shellcheck disable=SC2086
  EAGLE3_TOP_PUBLISH=tcp://127.0.0.1:$((P + 2000)) $SETSID python3 -m sglang.launch_server \
    --model-path "$TD" --speculative-draft-model-path "$DD" --load-format dummy \
    --speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4 --attention-backend triton --sampling-backend pytorch \
    --dtype bfloat16 --skip-tokenizer-init --port "$P" --host 127.0.0.1 --mem-fraction-static "$M" \
    --decode-log-interval "${DECODE_LOG:-10}" $GRAPH > "$W/server_$T.log" 2>&1 &
  echo $! > "$W/srvpid_$T"
}
wait_ready() {  # TAG PORT BY(epoch): 0 ready, 1 died, 2 not ready by BY
  local t=$(date +%s)
  while [ "$(date +%s)" -lt "$3" ]; do
    if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$2/health', timeout=2)" 2>/dev/null; then
      say "$1 ready after $(( $(date +%s) - t )) s"; return 0
    fi
    kill -0 "$(cat "$W/srvpid_$1")" 2>/dev/null || { say "$1 died at start"; tail -n 25 "$W/server_$1.log" | tee -a "$SUM"; return 1; }
    sleep 2
  done
  say "$1 not ready after $(( $(date +%s) - t )) s"; return 2
}
# each server is its own process group (setsid): stop takes its scheduler and detokenizer too
stop() { kill -TERM -- "-$(cat "$W/srvpid_$1")" 2>/dev/null || kill -TERM "$(cat "$W/srvpid_$1")" 2>/dev/null; }
reap() {  # wait for the group to go; KILL it after 20 s (the next server needs the GPU memory)
  for _ in $(seq 1 20); do kill -0 -- "-$(cat "$W/srvpid_$1")" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$(cat "$W/srvpid_$1")" 2>/dev/null && sleep 3
  touch "$W/stop_$1"; wait "$(cat "$W/subpid_$1")" 2>/dev/null; cat "$W/sub_$1.log" >> "$SUM"
}
ntok_for() {  # PORT BS VOCAB: new tokens per request for a run of RUN_S seconds, from a warm-up
  local js
  python3 "$B/server_client.py" tput "$1" "$2" 64 > /dev/null  # first batch at this size: graphs, allocator
  js=$(python3 "$B/server_client.py" tput "$1" "$2" 256) || { echo 256; return; }
  echo "$js" >> "$W/warmup.jsonl"
  python3 -c "import json, sys; x = json.loads(sys.argv[1]); print(max(64, min(4096, round(x['tok_s'] * float(sys.argv[2]) / x['bs']))))" "$js" "${RUN_S:-2.0}"
}
ab_sizes() {  # TAG PORT VOCAB END(epoch) BS...: each batch size its share of the time left
  local T=$1 P=$2 V=$3 END=$4; shift 4
  local left=$#
  for bs in "$@"; do
    local now share n
    now=$(date +%s); share=$(( (END - now) / left )); left=$((left - 1))
    if [ "$share" -lt 25 ]; then say "$T batch $bs skipped: ${share} s left for it"; continue; fi
    n=$(ntok_for "$P" "$bs" "$V")
    say "$T batch $bs: ntok $n, until +$(( now + share - T0 )) s"
    python3 "$B/ab_overhead.py" "$P" "$EAGLE3_TOP_PAUSE_FILE" "$W/server_$T.log" "$W/ab_${T}_bs$bs.json" \
      --bs "$bs" --ntok "$n" --vocab "$V" --rounds "${AB_ROUNDS:-40}" --switch-wait 0.6 \
      --deadline "$(( now + share ))" 2>&1 | tee -a "$SUM"
  done
}
# Host-side checks first (no server): PATH = the sync-debug check of every publish path
# (check_seal_sync.py) and the serving thread's µs per verify at each hidden in PATH_HIDDEN
# (bench_serving_path.py --quick); FP = the aux fingerprint's GPU time against the HBM read floor
# (bench_fingerprint_gpu.py). They are not given a share: they take ~1 - 2 min each.
phases=""
for ph in ${PHASES:-L8 WIDE}; do
  case $ph in
    PATH)
      say "PATH: sync-debug check of the publish paths"
      python3 -m benchmarks.gpu.check_seal_sync --json "$W/seal_sync.json" 2>&1 | tee -a "$SUM"
      for h in ${PATH_HIDDEN-4096}; do  # PATH_HIDDEN="": the sync-debug check alone
        say "PATH: serving-thread time per verify, hidden $h"
        python3 -m benchmarks.bench_serving_path --quick --hidden "$h" --json "$W/serving_path_h$h.json" 2>&1 | tee -a "$SUM"
      done
      pack ;;
    FP)
      say "FP: the aux fingerprint against the read floor"
      python3 "$B/bench_fingerprint_gpu.py" --json "$W/fingerprint_gpu.json" 2>&1 | tee -a "$SUM" | tail -n 25
      pack ;;
    *) phases="$phases $ph" ;;
  esac
done
START_S=${START_S:-150}  # a server's start with CUDA graph capture, at most (the 8B: ~2 min expected)
P=30100
# shellcheck disable=SC2086  # the phases are words
set -- $phases
left=$#
for ph in "$@"; do
  now=$(date +%s); end=$(( now + (DEADLINE - 30 - now) / left )); left=$((left - 1))
  if [ $(( end - now )) -lt $(( 60 + 30 )) ]; then say "$ph skipped: out of time ($(( end - now )) s in its share)"; continue; fi
  P=$((P + 1))
  case $ph in
    L8) tag=llama8b; vocab=128256; sizes="${L8_SIZES:-1 16 64}"; mem=${MEM_FRAC:-0.6}; td=/tmp/shapes/llama8b ;;
    WIDE) tag=kimi-wide; vocab=163840; sizes="64 1"; mem=${MEM_FRAC:-0.6}; td=/tmp/shapes/kimi-wide ;;
    TINY) tag=tiny; vocab=905; sizes="${TINY_SIZES:-1 16 64}"; mem=0.12; td=/tmp/mt
      python3 "$C/mkmodels.py" /tmp/mt tied > /dev/null || { say "TINY: mkmodels.py failed"; continue; } ;;
    *) say "unknown phase $ph"; continue ;;
  esac
  if [ "$tag" = tiny ]; then tdir=$td/tgt; else tdir=$td/target; fi
  say "$ph: serving $tag (share until +$(( end - T0 )) s)"
  serve "$tag" "$tdir" "$td/draft" $P "$mem"
  wait_ready "$tag" $P $(( end - 40 )); rc=$?
  if [ $rc = 1 ] && [ "$ph" = WIDE ] && [ $(( end - $(date +%s) )) -gt 90 ]; then
    reap "$tag"
    say "WIDE: kimi-wide (DeepSeek-V3 MLA) died at start: falling back to wide-llama (Llama, hidden 7168)"
    tag=wide-llama; P=$((P + 1))
    serve "$tag" /tmp/shapes/wide-llama/target /tmp/shapes/wide-llama/draft $P "$mem"
    wait_ready "$tag" $P $(( end - 40 )); rc=$?
  fi
  if [ $rc = 0 ]; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed "s/^/$tag GPU memory used: /" | tee -a "$SUM"
    # shellcheck disable=SC2086
    ab_sizes "$tag" $P $vocab $(( end - 25 )) $sizes
  fi
  stop "$tag"; reap "$tag"
  grep -h "eagle3-top\|eagle3_top" "$W/server_$tag.log" | sort | uniq -c | head -8 >> "$SUM"
  pack
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | head -5 | tee -a "$SUM"  # nothing should be left
say "all done"
pack
cat "$W/report.md"
