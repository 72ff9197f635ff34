"""``python -m vsbench``: the CLI, so that ``torchrun -m vsbench abid train ...`` starts it in every rank."""

from vsbench.cli.app import app

if __name__ == "__main__":
    app(prog_name="vsbench")
