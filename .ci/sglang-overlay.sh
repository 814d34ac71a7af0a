#!/usr/bin/env bash
# Install an older SGLang's real code (no GPU dependencies) into DIR, to put in front of .venv with
# PYTHONPATH=DIR: the sglang CPU tests then run against that version's classes. Only the packages
# whose pins differ from 0.5.23's (.ci/requirements-sglang.txt) go into DIR.
# Usage: .ci/sglang-overlay.sh VERSION DIR [PIP]
set -euo pipefail
version=$1 dir=$2 pip=${3:-pip}
old_hf="transformers==5.12.1 tokenizers==0.22.2 huggingface-hub==1.33.0"
case $version in
  0.5.17|0.5.18|0.5.19|0.5.20) pins="$old_hf openai==2.6.1 xgrammar==0.2.1" ;;
  0.5.21) pins="$old_hf openai==2.6.1 xgrammar==0.2.7" ;;
  0.5.22) pins="openai==2.6.1" ;;
  *) echo "sglang-overlay: no pins for SGLang $version (known: 0.5.17 - 0.5.22)" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086  # the pins are separate words
"$pip" install -q --no-deps --target "$dir" "sglang==$version" $pins
