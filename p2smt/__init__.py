"""p2smt: synthesize, prove and rank parallelism placements and reduction programs (P², with Z3)."""

__version__ = "0.1.0"
