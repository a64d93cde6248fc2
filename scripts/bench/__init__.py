"""Benchmarks: wall time and peak memory, written as CSV / JSON / PNG under results/."""
