"""Reading and writing files safely: bounded inputs (inputs), atomic writes, S3 and paths (storage),
CSV tables and restricted pickles that the benchmarks' readers build on."""
