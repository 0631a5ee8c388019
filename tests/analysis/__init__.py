"""Tests of the run files and the PySpark report."""
