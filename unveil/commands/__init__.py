"""`unveil` subcommands: each module defines `register(subparsers)`; the CLI finds them by name."""
