"""servesim's version, one place for the package and the CLI."""

__version__ = "0.1.0"
