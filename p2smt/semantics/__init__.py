"""semantics layer."""
