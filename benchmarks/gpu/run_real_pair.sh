#!/bin/bash
# The built-in pair on real SGLang (0.5.17 on the lent GPU machine), one device call from the repo
# root, carrying build/sglang-h200 and build/e3t-extra (benchmarks/gpu/sglang_env/build_carry.sh):
#   bash benchmarks/gpu/run_real_pair.sh          -> $OUT/real_pair.tar.gz, real_pair.md printed
#
# `eagle3-top toy export` writes the trained target and drafts as Hugging Face directories; six
# servers then run side by side, in two waves (plugin on, --attention-backend triton, fp16, CUDA graphs off):
#   H   target + draft-no-embed (ids [0, 2, 5])            healthy: check 0, probe diagonal >= 0.99,
#                                                          accept length within 5% of the built-in's
#   N   target + draft-ids-not-read                        the motivating bug: acceptance collapses
#   NN  target + draft-no-embed-ids-not-read               ids not read, layers that happen to work
#   R   target + draft-no-embed, --speculative-num-steps 1 --speculative-num-draft-tokens 16
#                                                          SGLang rewrites 16 draft tokens to 2
#   EL  target + draft (ids [-1, 2, 5], the embedding)     0.5.17's Llama crashes at the first prefill
#   EQ  target-qwen2 + draft                               0.5.17's Qwen2 aliases the embedding slot
#   QH  target-qwen2 + draft-no-embed                      the same Qwen2 target, healthy (the control)
# ONLY="EQ QH" runs just those cases.
# For each: `eagle3-top preflight --json` before any server starts, then a plain pyzmq recorder of
# the stream, the workload's 64 prompts x 96 tokens (real_pair_client.py, SGLang's meta_info kept),
# `eagle3-top check --json` during that traffic and `eagle3-top probe --json` after it.
# real_pair_report.py puts SGLang's figures beside ours, judges each case against what it must show
# and writes the table in real_pair.md. DEADLINE_S (default 560) bounds the whole call.
set -u
OUT=${OUT:-/tmp/e3t-out}; W=$OUT/real_pair; DEADLINE_DEFAULT=560
. benchmarks/gpu/pair_setup.sh

# TAG TARGET DRAFT STEPS TOPK DRAFT_TOKENS MANIFEST. Two waves: the second starts once the first is
# up, when SGLang's JIT kernels are built and cached (servers building the same kernel at the same
# moment are how one of them can load a half-written one)
WAVE1="H target draft-no-embed 3 1 4 draft-no-embed
N target draft-ids-not-read 3 1 4 draft
NN target draft-no-embed-ids-not-read 3 1 4 draft-no-embed
R target draft-no-embed 1 1 16 draft-no-embed"
WAVE2="EL target draft 3 1 4 draft
EQ target-qwen2 draft 3 1 4 draft
QH target-qwen2 draft-no-embed 3 1 4 draft-no-embed"
only() { if [ -n "${ONLY:-}" ]; then grep -E "^($(echo "$ONLY" | tr ' ' '|')) " || true; else cat; fi; }
WAVE1=$(echo "$WAVE1" | only); WAVE2=$(echo "$WAVE2" | only)  # ONLY="EQ QH": just those cases
CASES=$(printf '%s\n%s\n' "$WAVE1" "$WAVE2" | grep . )
echo "$CASES" > "$W/cases.txt"

while read -r tag tgt drf st tk nd man; do
  $E3T preflight --model-path $P/$tgt --speculative-draft-model-path $P/$drf --speculative-num-steps "$st" \
    --speculative-eagle-topk "$tk" --speculative-num-draft-tokens "$nd" --manifest "$P/$man.manifest.json" \
    --json > "$W/preflight_$tag.json" 2> "$W/preflight_$tag.err"
  echo "$?" > "$W/preflight_$tag.rc"
done <<< "$CASES"
echo "== preflight done at $(( $(date +%s) - T0 )) s"

run_case() {  # TAG TARGET DRAFT STEPS TOPK DRAFT_TOKENS MANIFEST PORT PUBPORT
  local tag=$1 tgt=$2 drf=$3 st=$4 tk=$5 nd=$6 man=$P/$7.manifest.json port=$8 pub=tcp://127.0.0.1:$9
  python3 "$B/subscriber_check.py" "$tag" "$pub" 540 "$W" > "$W/sub_$tag.log" 2>&1 &
  local sub=$!
  # check listens from before the server starts: a server that dies at its first prefill has
  # published its hello by then (a check started after the crash would hear nothing)
  $E3T check "$pub" --manifest "$man" --json --steps 20 --timeout 360 > "$W/check_$tag.json" 2> "$W/check_$tag.err" &
  local chk=$!
  # six servers start at once: a fixed KV pool (--max-total-tokens) keeps each one's allocation from
  # eating into the free memory the others measure while they size theirs
  # transformers 5 loads any model_type qwen2 directory's tokenizer as Qwen2Tokenizer, whatever its
  # tokenizer_config.json names, and that drops the built-in language's words: SGLang's warm-up
  # prompt becomes zero tokens, and a zero-token prefill crashes 0.5.17 with 32-wide heads (SIGFPE
  # in its JIT rope kernel). The Llama directory's tokenizer is the same file, loaded as written.
  EAGLE3_TOP_PUBLISH=$pub $SETSID python3 -m sglang.launch_server --model-path "$P/$tgt" --tokenizer-path "$P/target" \
    --speculative-algorithm EAGLE3 --speculative-draft-model-path "$P/$drf" --speculative-num-steps "$st" \
    --speculative-eagle-topk "$tk" --speculative-num-draft-tokens "$nd" --attention-backend triton \
    --dtype float16 --disable-cuda-graph --port "$port" --host 127.0.0.1 --mem-fraction-static 0.5 --max-total-tokens 32768 \
    > "$W/server_$tag.log" 2>&1 &
  echo $! > "$W/srvpid_$tag"
  local ready=0 t=$(date +%s)
  while [ "$(date +%s)" -lt $((DEADLINE - 120)) ]; do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null && { ready=1; break; }
    kill -0 "$(cat "$W/srvpid_$tag")" 2>/dev/null || break
    sleep 1
  done
  echo "$tag ready=$ready after $(( $(date +%s) - t )) s" >> "$W/ready.txt"
  if [ $ready = 1 ]; then
    python3 "$B/real_pair_client.py" "$port" "$P/workload.json" "$W/client_$tag.json" > "$W/client_$tag.log" 2>&1
  else
    why=$(grep -m1 -E "^[A-Za-z]*Error: |Fatal Python error" "$W/server_$tag.log" || tail -n 1 "$W/server_$tag.log")
    echo "{\"error\": \"server not ready: $(echo "$why" | tr -d '"\\' | cut -c1-300)\"}" > "$W/client_$tag.json"
  fi
  wait $chk; echo "$?" > "$W/check_$tag.rc"
  if [ $ready = 1 ]; then
    $E3T probe --server "http://127.0.0.1:$port" --endpoint "$pub" --manifest "$man" --json --samples 4 \
      --timeout 90 > "$W/probe_$tag.json" 2> "$W/probe_$tag.err"
    echo "$?" > "$W/probe_$tag.rc"
  fi
  sleep 1; touch "$W/stop_$tag"; wait $sub
  stop "$tag"; reap "$tag"
}
start_wave() {
  [ -n "$1" ] || return 0
  while read -r tag tgt drf st tk nd man; do
    run_case "$tag" "$tgt" "$drf" "$st" "$tk" "$nd" "$man" $((30100 + i)) $((5600 + 10 * i)) &
    i=$((i + 1))
  done <<< "$1"
}
i=0
start_wave "$WAVE1"
n1=$(echo "$WAVE1" | grep -c . || true)
while [ "$(cat "$W/ready.txt" 2>/dev/null | wc -l)" -lt "$n1" ] && [ "$(date +%s)" -lt $((DEADLINE - 200)) ]; do sleep 2; done
echo "== second wave at $(( $(date +%s) - T0 )) s"
start_wave "$WAVE2"
wait
echo "== cases done at $(( $(date +%s) - T0 )) s"
cat "$W/ready.txt"
python3 "$B/real_pair_report.py" "$W" | tee "$W/real_pair.md"
grep -h "Traceback\|Error\|error" "$W"/server_*.log | sort | uniq -c | sort -rn | head -12
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | head -5  # nothing should be left
tar -C "$OUT" -czf "$OUT/real_pair.tar.gz" real_pair
echo "== all done at $(( $(date +%s) - T0 )) s"
