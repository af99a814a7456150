"""Readers of XLA modules (HLO text, StableHLO): the collectives a module runs, its chains and its mesh."""
