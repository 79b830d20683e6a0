"""Flower's SecAgg+ on vflcrypto's example vectors (the benchmark's reference app)."""
