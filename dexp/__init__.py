"""dexp's command-line tool: simulate one configuration, reproduce the papers' experiments."""

__all__ = ["__version__"]

__version__ = "0.1.0"
