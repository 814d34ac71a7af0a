#!/bin/bash
# On the GPU machine: unpack the carried packages (pk/*.tar.xz beside this file) into /tmp/site,
# each once per warm machine. Then: export PYTHONPATH=/tmp/site CUDA_HOME=/usr/local/cuda
C=$(cd "$(dirname "$0")" && pwd); mkdir -p /tmp/site
for f in "$C"/pk/*.tar.xz; do
  n=$(basename "$f" .tar.xz); [ -f /tmp/site/.done_$n ] && continue
  ( tar -xJf "$f" -C /tmp/site && touch /tmp/site/.done_$n ) &
done
wait
du -sm /tmp/site
