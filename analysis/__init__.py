"""Run files (schema and Parquet sink) and the PySpark report job."""
