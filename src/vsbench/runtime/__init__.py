"""Where a step runs: the compute device (CUDA, AMP) and the container image it was built into."""
