"""Importable only because the matrix test puts this folder on sys.path in-process."""

GREETING = "only here"
