"""`python -m budgetscope …`, the same as the `budgetscope` command."""

from budgetscope.cli import main

if __name__ == "__main__":
    main(prog_name="budgetscope")
