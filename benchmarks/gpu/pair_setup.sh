# Sourced (not run) by the scripts that serve the built-in pair on real SGLang, from the repo root,
# with W set (their results folder) and DEADLINE_S's default in DEADLINE_DEFAULT: installs the plugin
# (install_plugin.sh), says which GPU and SGLang, and writes the pair with `eagle3-top toy export`
# into P=/tmp/pair (its workload.json and manifests copied into W). Sets R, B, T0, DEADLINE, E3T, P,
# SETSID; defines stop TAG and reap TAG for servers started under $SETSID with their pid in
# $W/srvpid_TAG.
R=$(pwd); B=$R/benchmarks/gpu
mkdir -p "$W"
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-$DEADLINE_DEFAULT}))
bash "$B/install_plugin.sh" > "$W/install.log" 2>&1 || { cat "$W/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:/tmp/e3t CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
E3T="python3 -m eagle3_top.tui.cli"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$W/gpu.txt"
python3 -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__)" | tee -a "$W/gpu.txt"
P=/tmp/pair; rm -rf $P
$E3T toy export --out $P > "$W/export.log" 2>&1 || { cat "$W/export.log"; exit 1; }
cp $P/workload.json $P/*.manifest.json "$W/"
echo "== exported at $(( $(date +%s) - T0 )) s"

SETSID=$(command -v setsid || true)
# each server in its own process group: stopping it takes its scheduler and detokenizer along
stop() { kill -TERM -- "-$(cat "$W/srvpid_$1")" 2>/dev/null; }
reap() {  # wait for the group to go; KILL it after 15 s (and let the GPU memory go)
  for _ in $(seq 1 15); do kill -0 -- "-$(cat "$W/srvpid_$1")" 2>/dev/null || return 0; sleep 1; done
  kill -KILL -- "-$(cat "$W/srvpid_$1")" 2>/dev/null; sleep 2
}
