#!/usr/bin/env bash
# On a CUDA machine: the GPU step's correctness tests, then its figures, each log copied to $OUT (or ./gpu-out).
#   bash benchmarks/gpu/step_checks.sh            # ~5 min on an H100/H200: tests, attention_bench, mixed_step_bench
# A failing part does not stop the next; the exit status is the tests'.
set -u
out="${OUT:-gpu-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
"$py" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/device.txt"
timeout 240 "$py" -m pytest -q -x tests/test_paged_attention.py tests/test_fused_norm.py tests/test_engine_triton.py \
    tests/test_engine_cuda_graphs.py tests/test_engine_step.py 2>&1 | tee "$out/tests.txt"
status=${PIPESTATUS[0]}
timeout 120 "$py" benchmarks/gpu/attention_bench.py 2>&1 | tee "$out/attention_bench.txt"
timeout 240 "$py" benchmarks/gpu/mixed_step_bench.py 2>&1 | tee "$out/mixed_step_bench.txt"
exit "$status"
