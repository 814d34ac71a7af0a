"""The `eagle3-top` subcommands, one module each; `tui/cli.py` dispatches to them."""
