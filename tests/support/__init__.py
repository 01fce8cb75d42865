"""Helpers of the test suite and the benchmarks: real redis-server, Cluster and Sentinel
processes on loopback, worker processes, and the descriptor callables the test settings name."""
