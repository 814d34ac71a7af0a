#!/bin/bash
# Real-server check of the SGLang plugin on a CUDA machine (run from the repo root; results in $OUT).
#
# Needs the carried SGLang 0.5.17 set in build/sglang-h200 and a msgpack wheel in build/e3t-extra
# (the H200 image has no msgpack), both git-ignored. Build them once, on your machine, from the repo
# root: benchmarks/gpu/sglang_env/build_carry.sh. Then on the device:
#   bash benchmarks/gpu/run_server_check.sh        (carry build/sglang-h200 and build/e3t-extra)
#
# Check: two servers at once (tiny Llama target + EAGLE-3 draft from mkmodels.py, --attention-backend
# triton): G0 random weights, CUDA graphs off, tracer on; G1 'tied' weights (every draft accepted),
# CUDA graphs on, tracer on. A plain pyzmq subscriber records each from before its start (so warm-up
# and HEALTH_CHECK requests are seen); compare_check.py checks hello and step rows against
# /get_server_info and meta_info.
# Throughput: then one server at a time on the GPU, same flags as G1. Phase AB (default): one traced
# server with a subscriber attached, tracer recording (T) and paused through EAGLE3_TOP_PAUSE_FILE
# (P) in ABBA order, AB_ROUNDS (20) pairs at batch 1 (2048 tokens) and 32 (1536 tokens each), by
# ab_overhead.py: the median of the paired ratios with a 95% interval, and SGLang's own decode log
# per arm. The same process, so server-to-server variance (±20% seen on this machine between
# identical servers) stays out of the ratio. Phases T1, T2 (traced) and N (no tracer, no plugin
# active) compare separate servers instead, 6 runs each. PHASES="AB N" picks phases and order.
# SKIP_TPUT=1: the check only; ONLY_TPUT=1: the throughput only; DEADLINE_S: seconds after T_START
# by which everything must be done (phases that would not fit are skipped, and say so).
set -u
R=$(pwd); C=$R/build/sglang-h200; X=$R/build/e3t-extra; B=$R/benchmarks/gpu
OUT=${OUT:-/tmp/e3t-out}; mkdir -p "$OUT"
bash "$B/install_plugin.sh" || exit 1
export PYTHONPATH=/tmp/site:/tmp/e3t CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
python3 "$C/mkmodels.py" /tmp/mt tied >/dev/null && python3 "$C/mkmodels.py" /tmp/mr >/dev/null || exit 1
GRAPH="--cuda-graph-backend-decode full --cuda-graph-backend-prefill disabled --cuda-graph-max-bs-decode 32"
SETSID=$(command -v setsid || true)
export EAGLE3_TOP_PAUSE_FILE=$OUT/pause  # traced servers record nothing while it exists (AB phase)
rm -f "$EAGLE3_TOP_PAUSE_FILE"
serve() {  # TAG ROOT PORT PUBPORT(or -) extra...
  local T=$1 M=$2 P=$3 PP=$4; shift 4
  if [ "$PP" != - ]; then
    python3 "$B/subscriber_check.py" "$T" "tcp://127.0.0.1:$PP" 900 "$OUT" > "$OUT/sub_$T.log" 2>&1 &
    echo $! > "$OUT/subpid_$T"
    export EAGLE3_TOP_PUBLISH=tcp://127.0.0.1:$PP
  else
    unset EAGLE3_TOP_PUBLISH
  fi
  $SETSID python3 -m sglang.launch_server --model-path "$M/tgt" --speculative-algorithm EAGLE3 \
    --speculative-draft-model-path "$M/draft" --speculative-num-steps 3 --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4 --attention-backend triton --sampling-backend pytorch --dtype bfloat16 \
    --skip-tokenizer-init --port "$P" --host 127.0.0.1 --mem-fraction-static 0.12 "$@" > "$OUT/server_$T.log" 2>&1 &
  echo $! > "$OUT/srvpid_$T"
  unset EAGLE3_TOP_PUBLISH
}
wait_ready() {  # TAG PORT
  for i in $(seq 1 300); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$2/health', timeout=2)" 2>/dev/null && { echo "== $1 ready after $(( $(date +%s)-T0 )) s"; return 0; }
    kill -0 "$(cat $OUT/srvpid_$1)" 2>/dev/null || { echo "== $1 died"; tail -n 30 "$OUT/server_$1.log"; return 1; }
    sleep 1
  done; return 1
}
# each server is its own process group (setsid): stop takes its scheduler/detokenizer children too,
# or orphans keep spinning and slow every later server on the machine
stop() { kill -TERM -- "-$(cat $OUT/srvpid_$1)" 2>/dev/null || kill -TERM "$(cat $OUT/srvpid_$1)" 2>/dev/null; }
reap() { for i in $(seq 1 20); do kill -0 -- "-$(cat $OUT/srvpid_$1)" 2>/dev/null || return 0; sleep 1; done; kill -KILL -- "-$(cat $OUT/srvpid_$1)" 2>/dev/null || kill -KILL "$(cat $OUT/srvpid_$1)" 2>/dev/null; sleep 2; }
T0=$(date +%s); T_START=${T_START:-$T0}  # T_START: when the whole device call began (run_gpu.sh)
if [ "${ONLY_TPUT:-0}" != 1 ]; then
serve G0 /tmp/mr 30000 5557 --disable-cuda-graph
serve G1 /tmp/mt 30001 5567 $GRAPH
wait_ready G0 30000; wait_ready G1 30001
python3 "$B/server_client.py" check 30000 "$OUT/check_G0.json" &
CK=$!
python3 "$B/server_client.py" check 30001 "$OUT/check_G1.json"; wait $CK  # not a bare wait: servers run in the background
sleep 2; touch "$OUT/stop_G0" "$OUT/stop_G1"; stop G0; stop G1
wait "$(cat $OUT/subpid_G0)" "$(cat $OUT/subpid_G1)" 2>/dev/null
reap G0; reap G1
cat "$OUT"/sub_*.log
python3 "$B/compare_check.py" G0 "$OUT" /tmp/mr/draft/config.json
python3 "$B/compare_check.py" G1 "$OUT" /tmp/mt/draft/config.json
echo "== check done at $(( $(date +%s)-T0 )) s"
fi
[ "${SKIP_TPUT:-0}" = 1 ] && exit 0
echo "== decode tokens/s, one server at a time: T = tracer publishing + subscriber attached, N = no tracer"
P=30002
measure() {  # TAG PORT BS NTOK: one throughput run, appended to tput.txt
  echo "$1 $(python3 "$B/server_client.py" tput $2 $3 $4)" | tee -a "$OUT/tput.txt"
}
for ph in ${PHASES:-AB}; do
  # a device call has a time limit: start no phase that could not finish inside DEADLINE_S
  if [ $(( $(date +%s) - T_START )) -gt $(( ${DEADLINE_S:-100000} - 110 )) ]; then echo "== $ph skipped: out of time"; continue; fi
  P=$((P + 1))
  if [ "$ph" = N ]; then serve "$ph" /tmp/mt $P - $GRAPH; else serve "$ph" /tmp/mt $P $((P + 2000)) $GRAPH; fi
  wait_ready "$ph" $P || continue
  if [ "$ph" = AB ]; then  # the same server, tracer recording (T) and paused (P): ab_overhead.py
    for bs in 1 32; do
      n=2048; [ $bs = 32 ] && n=1536  # runs of ~2 s: whole seconds of SGLang's log inside them
      python3 "$B/ab_overhead.py" $P "$EAGLE3_TOP_PAUSE_FILE" "$OUT/server_$ph.log" "$OUT/ab_bs$bs.json" \
        --bs $bs --ntok $n --rounds "${AB_ROUNDS:-20}" | tee -a "$OUT/ab.txt"
    done
  else
  for bs in 1 32; do
    n=1536; [ $bs = 32 ] && n=512
    python3 "$B/server_client.py" tput $P $bs 64 >/dev/null
    for round in 1 2 3 4 5 6; do
      measure "${ph:0:1}" $P $bs $n
    done
  done
  fi
  touch "$OUT/stop_$ph"; stop "$ph"
  reap "$ph"
  [ -f "$OUT/subpid_$ph" ] && { wait "$(cat $OUT/subpid_$ph)" 2>/dev/null; cat "$OUT/sub_$ph.log"; }
done
[ -f "$OUT/tput.txt" ] && python3 - "$OUT/tput.txt" <<'PY'
import json, sys, statistics as st
d = {}
for line in open(sys.argv[1]):
    tag, js = line.split(" ", 1); x = json.loads(js); d.setdefault((x["bs"], tag), []).append(x["tok_s"])
for bs in (1, 32):
    t = d.get((bs, "T"), [])
    for base, what in (("P", "same server, tracer paused"), ("N", "a server without the tracer")):
        b = d.get((bs, base), [])
        if t and b:
            print(f"batch {bs}: tracer {st.median(t):.0f} tok/s vs {what} {st.median(b):.0f} tok/s: "
                  f"ratio {st.median(t) / st.median(b):.3f} (runs {[round(x) for x in t]} vs {[round(x) for x in b]})")
PY
grep -h "eagle3-top\|eagle3_top" "$OUT"/server_*.log | sort | uniq -c | head -8
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | head -5  # nothing should be left
echo "== all done at $(( $(date +%s)-T0 )) s"
