"""The four workloads of the benchmark (issue 5)."""
