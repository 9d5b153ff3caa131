"""benchmarks/gpu/decode_profile.py puts kernels (names of the forms a CUDA profile of torch, cuBLAS and our Triton
kernels gives) and CPU ops in the right group and counts per token; its CPU run (the `tiny` engine, no graphs)
gives the op groups with the floor unknown."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks/gpu/decode_profile.py"


@pytest.fixture(scope="module")
def profile():
    spec = importlib.util.spec_from_file_location("decode_profile", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NAMES = {
    "_rope_write_kv_kernel": "rope+kv write",
    "_paged_attention_kernel": "attention",
    "_paged_attention_reduce_kernel": "attention",  # split-KV's second kernel
    "_add_rms_norm_kernel": "norm",
    "_silu_mul_kernel": "activation",
    "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, float, 128, 16, 4, 4, false>": "gemm",
    "nvjet_hsh_64x8_64x16_4x1_v_bz_TNT": "gemm",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_execute_segment_k_off_kernel__5x_cublas": "gemm",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
    "unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4>)": (
        "sampler"
    ),
    "void at::native::vectorized_elementwise_kernel<4, at::native::neg_kernel_cuda(at::TensorIteratorBase&)": "rope",
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2>>": (
        "rope"
    ),
    "void at::native::elementwise_kernel<128, 4, at::native::index_copy_kernel_impl<at::native::OpaqueType<2> >"
    "(at::TensorIterator&, long, long, long)::{lambda(int)#1}>(int, {lambda(int)#1})": "kv write",
    "Memcpy HtoD (Pinned -> Device)": "copies",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >": (
        "copies"
    ),
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, MulFunctor<float>>>": (
        "other"
    ),
    "aten::mm": "gemm",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::index_copy_": "kv write",
    "aten::silu": "activation",
    "aten::cat": "rope",
    "aten::argmax": "sampler",
    "aten::embedding": "copies",
    "aten::mul": "other",
}


@pytest.mark.parametrize("name,group", NAMES.items())
def test_group_of_real_names(profile, name, group):
    assert profile.group_of(name) == group


def test_summarize_counts_per_token(profile):
    acts = [("aten::mm", 30.0), ("aten::mm", 10.0), ("aten::silu", 5.0), ("aten::mul", 5.0)]
    got = profile.summarize(acts, tokens=2)
    assert got["count_per_token"] == 2 and got["us_per_token"] == 25
    assert got["groups"]["gemm"] == {"count_per_token": 1.0, "us_per_token": 20.0, "share": 0.8}
    assert list(got["groups"])[0] == "gemm"  # the costliest first
    assert got["top"][0] == {
        "name": "aten::mm",
        "group": "gemm",
        "count_per_token": 1.0,
        "us_per_token": 20.0,
        "median_us": 20.0,
    }


def test_cpu_run_reports_ops_and_an_unknown_floor():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    args = ["--config", "tiny", "--device", "cpu", "--steps", "2", "--eager-steps", "2"]
    p = subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    results = [json.loads(line[len("RESULT ") :]) for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    graph, eager = results
    assert graph["pass"] == "graph" and graph["why_none"] and "count_per_token" not in graph
    assert eager["pass"] == "eager" and eager["engine"] == str(ROOT / "budgetscope")
    assert eager["floor_ms"] is None and "no CUDA" in eager["why_no_floor"]
    assert {"gemm", "attention", "kv write"} <= set(eager["groups"])
    assert eager["groups"]["gemm"]["count_per_token"] > 0
