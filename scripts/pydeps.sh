#!/usr/bin/env bash
# pydeps.sh - installs, when missing, the Python packages our oracle tests import (tests and
# fixture generation only; hmoe never needs Python at run time). Idempotent.
set -euo pipefail
py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "pydeps.sh: no $py" >&2; exit 1; }
missing=()
"$py" -c 'import numpy' 2>/dev/null || missing+=(numpy)
"$py" -c 'import gguf' 2>/dev/null || missing+=(gguf==0.19.0)
"$py" -c 'import ml_dtypes' 2>/dev/null || missing+=(ml_dtypes)   # FP8 oracle in quant_python
# checkpoints written by the tests themselves (gptoss_quant_python's bad and float ones)
"$py" -c 'import safetensors.numpy' 2>/dev/null || missing+=(safetensors)
# the official client the server tests talk through (tests/server_python.py)
"$py" -c 'import openai' 2>/dev/null || missing+=(openai)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "pydeps.sh: pip install ${missing[*]}" >&2
"$py" -m pip install -q --disable-pip-version-check "${missing[@]}" ||
    "$py" -m pip install -q --disable-pip-version-check --break-system-packages "${missing[@]}" ||
    echo "pydeps.sh: could not install ${missing[*]}: the Python oracle tests will fail" >&2
