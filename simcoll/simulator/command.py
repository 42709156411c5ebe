"""Command-line sub-commands of this feature (placeholder: being written)."""


def register(subparsers, add_command) -> None:
    """Add this feature's sub-commands to ``subparsers``."""
