"""Which adapter claims a span, decided by what the span is (its name), never by a flag the user passes."""

from __future__ import annotations

NATIVE_ROOT = "llm.request"
NATIVE_STEP = "engine.step"
STAGE_PREFIX = "stage."
CLIENT_ROOT = "llm.client.request"
VLLM_ROOT = "llm_request"

SOURCE_SQL = f"""CASE
  WHEN name IN ('{NATIVE_ROOT}', '{NATIVE_STEP}') OR starts_with(name, '{STAGE_PREFIX}') THEN 'native'
  WHEN name = '{CLIENT_ROOT}' THEN 'client'
  WHEN name = '{VLLM_ROOT}' THEN 'vllm'
  ELSE 'other' END"""
"""SQL expression over a `name` column: native, client, vllm or other."""
