"""Z3 engine: encodings as plug-ins (``encodings/``), enumeration, plan proofs and CEGIS over values."""
