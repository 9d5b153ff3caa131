"""The `budgetscope` console script's entry point (pyproject `[project.scripts]`); the commands are in
`budgetscope/commands/`."""

from budgetscope.commands import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
