"""The package version, on the ground floor so that any stage (the disk cache's key) can read it without
importing the package's top level."""

__version__ = "0.1.0"
