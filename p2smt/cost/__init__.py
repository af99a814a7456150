"""cost layer."""
