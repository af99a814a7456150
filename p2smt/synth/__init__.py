"""synth layer."""
