"""The `budgetscope` console script's entry point (pyproject `[project.scripts]`); the commands are in
`budgetscope/commands/`."""

import os

# numpy's OpenBLAS starts a thread a core when it loads (duckdb and pyarrow import numpy), and each spins before it
# sleeps: about 0.1 CPU-s of every command's start on 2 cores, for nothing, since no command does linear algebra
# with numpy (the engine's is torch's, with its own threads). Set before numpy loads; a value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from budgetscope.commands import main  # noqa: E402 - after the environment it must see

__all__ = ["main"]

if __name__ == "__main__":
    main()
