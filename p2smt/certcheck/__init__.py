"""The independent checker of state-graph certificates: closure in Python, each step by Z3 against an
SMT-LIB2 statement of docs/semantics.md §4. It imports nothing of the search, the interpreters or the
encodings (an import-linter contract in pyproject.toml says so)."""
