"""`budgetscope engine`: help text, option errors, and that importing it stays light (no torch)."""

import subprocess
import sys

from click.testing import CliRunner

from budgetscope.engine.command import engine


def test_importing_the_command_does_not_import_torch():
    code = "import sys; from budgetscope.engine.command import engine; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_group_and_serve_have_help():
    runner = CliRunner()
    assert "serve" in runner.invoke(engine, ["--help"]).output
    result = runner.invoke(engine, ["serve", "--help"])
    assert result.exit_code == 0
    for option in (
        "--config",
        "--port",
        "--host",
        "--max-batched-tokens",
        "--max-seqs",
        "--kv-blocks",
        "--no-chunked-prefill",
        "--checkpoint",
        "--max-waiting",
        "--tier-priority",
        "--attention",
        "Example:",
    ):
        assert option in result.output


def test_bad_options_are_one_line_errors():
    runner = CliRunner()
    result = runner.invoke(engine, ["serve", "--tier-priority", "nonsense", "--no-instrument"])
    assert result.exit_code == 2 and "TIER=N" in result.output
    result = runner.invoke(engine, ["serve", "--max-seqs", "64", "--max-batched-tokens", "8", "--no-instrument"])
    assert result.exit_code == 1 and "max_num_batched_tokens" in result.output
    assert "Traceback" not in result.output


def test_attention_option_errors_are_one_line():
    runner = CliRunner()
    result = runner.invoke(engine, ["serve", "--attention", "flash", "--no-instrument"])
    assert result.exit_code == 2 and "'flash' is not one of 'auto', 'triton', 'sdpa'" in result.output
    result = runner.invoke(
        engine, ["serve", "--attention", "triton", "--device", "cpu", "--compile", "--no-instrument"]
    )
    assert result.exit_code == 1 and "--compile works with --attention sdpa only" in result.output
    assert "Traceback" not in result.output
