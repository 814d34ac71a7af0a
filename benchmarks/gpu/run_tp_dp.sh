#!/bin/bash
# Tensor- and data-parallel SGLang on two GPUs, traced: one device call on the two-GPU kind
# (nvidia-h200-x2), from the repo root, carrying build/sglang-h200 and build/e3t-extra
# (benchmarks/gpu/sglang_env/build_carry.sh):
#   bash benchmarks/gpu/run_tp_dp.sh        -> $OUT/tp_dp.tar.gz, tp_dp.md printed
#
# The built-in pair (`eagle3-top toy export`: target + draft-no-embed, ids [0, 2, 5], the healthy
# draft), SGLang 0.5.17, fp16, --attention-backend triton, the plugin on with its defaults.
#   DP  --dp-size 2 (TP 1 each, CUDA graphs off): replica d's rank 0 publishes on PUB + d (replica
#       d's ranks are numbered from d x tp x pp). `eagle3-top relay` fans both into one endpoint.
#       Plain pyzmq recorders on each replica and on the relay; `check` through the relay (started
#       before the server); the monitor's `--once --json` (its `fleet` object is the fleet view's
#       merged figures) through the relay during the workload; the workload's 64 prompts x 96 tokens.
#   TP  --tp-size 2 (CUDA graphs on, as served): only rank 0 publishes, on PUB; a recorder on
#       PUB + 1 shows whether rank 1 does. `check` on PUB, `--once --json` on PUB..PUB+1, the
#       workload, `probe` on rank 0; then the tracer on vs paused in the same server (ab_overhead.py:
#       ABBA pairs at batch 1 and 32, AB_ROUNDS (20) or as many as fit before the deadline).
# tp_dp_report.py puts SGLang's meta_info beside the streams and judges each part. DEADLINE_S
# (default 570) bounds the whole call.
set -u
OUT=${OUT:-/tmp/e3t-out}; W=$OUT/tp_dp; DEADLINE_DEFAULT=570
. benchmarks/gpu/pair_setup.sh
MAN=$P/draft-no-embed.manifest.json

export EAGLE3_TOP_PAUSE_FILE=$W/pause  # the tracer records nothing while it exists (the A/B)
rm -f "$EAGLE3_TOP_PAUSE_FILE"
record() {  # TAG ENDPOINT: a plain pyzmq recorder until stop_TAG appears
  python3 "$B/subscriber_check.py" "$1" "$2" 540 "$W" > "$W/sub_$1.log" 2>&1 &
  echo $! > "$W/subpid_$1"
}
serve() {  # TAG HTTP_PORT PUB_ENDPOINT extra...: one server, its own process group
  local tag=$1 port=$2 pub=$3; shift 3
  EAGLE3_TOP_PUBLISH=$pub $SETSID python3 -m sglang.launch_server --model-path "$P/target" \
    --speculative-algorithm EAGLE3 --speculative-draft-model-path "$P/draft-no-embed" \
    --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
    --attention-backend triton --dtype float16 --port "$port" --host 127.0.0.1 \
    --mem-fraction-static 0.5 --max-total-tokens 32768 "$@" > "$W/server_$tag.log" 2>&1 &
  echo $! > "$W/srvpid_$tag"
}
ready() {  # TAG HTTP_PORT
  local t=$(date +%s)
  while [ "$(date +%s)" -lt $((DEADLINE - 60)) ]; do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$2/health', timeout=2)" 2>/dev/null && {
      echo "$1 ready=1 after $(( $(date +%s) - t )) s" >> "$W/ready.txt"; return 0; }
    kill -0 "$(cat "$W/srvpid_$1")" 2>/dev/null || break
    sleep 1
  done
  echo "$1 ready=0 after $(( $(date +%s) - t )) s" >> "$W/ready.txt"; tail -n 30 "$W/server_$1.log"; return 1
}
finish_recorders() { for t in "$@"; do touch "$W/stop_$t"; done; for t in "$@"; do wait "$(cat "$W/subpid_$t")"; done; }

# -- DP: two replicas, one relay -----------------------------------------------------------------
record DP0 tcp://127.0.0.1:5710; record DP1 tcp://127.0.0.1:5711
$E3T relay --bind tcp://127.0.0.1:5730 --connect tcp://127.0.0.1:5710-5711 --status-interval 30 \
  > "$W/relay.log" 2>&1 &
RELAY=$!
record DPR tcp://127.0.0.1:5730
$E3T check tcp://127.0.0.1:5730 --manifest "$MAN" --json --steps 20 --timeout 240 > "$W/check_DP.json" 2> "$W/check_DP.err" &
CHK=$!
serve DP 30200 tcp://127.0.0.1:5710 --dp-size 2 --disable-cuda-graph
if ready DP 30200; then
  $E3T tcp://127.0.0.1:5730 --manifest "$MAN" --json -i 20 > "$W/once_DP.json" 2> "$W/once_DP.err" &
  ONCE=$!
  sleep 1
  python3 "$B/real_pair_client.py" 30200 "$P/workload.json" "$W/client_DP.json" e3tdp > "$W/client_DP.log" 2>&1
  wait $ONCE
fi
wait $CHK; echo "$?" > "$W/check_DP.rc"
sleep 1; finish_recorders DP0 DP1 DPR
kill -TERM $RELAY; wait $RELAY
stop DP; reap DP
echo "== DP done at $(( $(date +%s) - T0 )) s"

# -- TP: one server over both GPUs ---------------------------------------------------------------
record TP0 tcp://127.0.0.1:5700; record TP1 tcp://127.0.0.1:5701
$E3T check tcp://127.0.0.1:5700 --manifest "$MAN" --json --steps 20 --timeout 240 > "$W/check_TP.json" 2> "$W/check_TP.err" &
CHK=$!
serve TP 30210 tcp://127.0.0.1:5700 --tp-size 2 --cuda-graph-backend-decode full \
  --cuda-graph-backend-prefill disabled --cuda-graph-max-bs-decode 32
if ready TP 30210; then
  $E3T tcp://127.0.0.1:5700-5701 --manifest "$MAN" --json -i 20 > "$W/once_TP.json" 2> "$W/once_TP.err" &
  ONCE=$!
  sleep 1
  python3 "$B/real_pair_client.py" 30210 "$P/workload.json" "$W/client_TP.json" e3ttp > "$W/client_TP.log" 2>&1
  wait $ONCE
  $E3T probe --server http://127.0.0.1:30210 --endpoint tcp://127.0.0.1:5700 --manifest "$MAN" --json \
    --samples 4 --timeout 90 > "$W/probe_TP.json" 2> "$W/probe_TP.err"
  echo "$?" > "$W/probe_TP.rc"
fi
wait $CHK; echo "$?" > "$W/check_TP.rc"
sleep 1; finish_recorders TP0 TP1  # the A/B's traffic is not the workload's: recorded apart
if grep -q "TP ready=1" "$W/ready.txt"; then
  record TPAB tcp://127.0.0.1:5700  # a subscriber attached, as in production
  for bs in 1 32; do
    n=1024; [ $bs = 32 ] && n=512
    left=$(( (DEADLINE - $(date +%s) - 40) / (bs == 1 ? 2 : 1) ))
    python3 "$B/ab_overhead.py" 30210 "$EAGLE3_TOP_PAUSE_FILE" "$W/server_TP.log" "$W/ab_bs$bs.json" \
      --bs $bs --ntok $n --rounds "${AB_ROUNDS:-20}" --vocab 256 --deadline $(( $(date +%s) + left )) \
      | tee -a "$W/ab.txt"
  done
  finish_recorders TPAB
fi
stop TP; reap TP
echo "== TP done at $(( $(date +%s) - T0 )) s"
cat "$W/ready.txt" "$W"/sub_*.log
python3 "$B/tp_dp_report.py" "$W" | tee "$W/tp_dp.md"
grep -h "Traceback\|Error" "$W"/server_*.log | sort | uniq -c | sort -rn | head -12
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | head -5  # nothing should be left
tar -C "$OUT" -czf "$OUT/tp_dp.tar.gz" tp_dp
echo "== all done at $(( $(date +%s) - T0 )) s"
