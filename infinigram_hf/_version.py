"""The package version: a leaf module, so that the build (meta.json records it) and the CLI
(--version) read it without importing the package's __init__."""
__version__ = "0.1.0"
