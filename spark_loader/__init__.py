"""PySpark jobs for pbtree: build index files from Parquet, match event files in bulk."""
