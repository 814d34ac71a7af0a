#!/bin/bash
# On the device: unpack the carried SGLang set (build/sglang-h200, from benchmarks/gpu/sglang_env/build_carry.sh)
# into /tmp/site and install eagle3-top into /tmp/e3t as a plugin: the package (tracer, hooks, and tui
# for its headless commands) plus a dist-info whose
# entry_points.txt registers [sglang.srt.plugins] eagle3_top (what `pip install .` gives;
# the H200 image has no registry and no hatchling, so it is written by hand). msgpack, mcap, zstandard
# and lz4 come from build/e3t-extra's wheels. Then: export PYTHONPATH=/tmp/site:/tmp/e3t
set -u
R=$(pwd); C=$R/build/sglang-h200; X=$R/build/e3t-extra
bash "$C/setup.sh" >/dev/null || exit 1
E=/tmp/e3t; rm -rf $E; mkdir -p $E/eagle3_top $E/eagle3_top-0.1.0.dist-info
touch $E/eagle3_top/__init__.py
cp -r "$R/tracer" $E/eagle3_top/tracer; cp -r "$R/hooks" $E/eagle3_top/hooks
cp -r "$R/tui" $E/eagle3_top/tui  # the headless commands (check, probe, preflight, toy export); no textual needed
printf 'Metadata-Version: 2.1\nName: eagle3-top\nVersion: 0.1.0\n' > $E/eagle3_top-0.1.0.dist-info/METADATA
printf '[sglang.srt.plugins]\neagle3_top = eagle3_top.hooks.sglang.plugin:register\n' > $E/eagle3_top-0.1.0.dist-info/entry_points.txt
for m in msgpack mcap zstandard lz4; do  # what the image lacks, from the carried wheels
  python3 -c "import $m" 2>/dev/null || python3 -m zipfile -e "$X"/$m-*.whl $E
done
PYTHONPATH=/tmp/site:$E python3 -c "import eagle3_top.hooks.sglang.plugin, eagle3_top.tracer.serving.publisher, msgpack; from importlib.metadata import entry_points; print('plugin entry points:', list(entry_points(group='sglang.srt.plugins')))"
