"""representative: the size-reduction wrapper strategy (``p2smt.smt.representative``) under its encoding name.

Not an encoding of its own: it solves the hierarchy with every non-trivial level of size 2 with an inner
encoding (``bool-matrix`` by default), checks each program at the real size and refines the sizes. It is
registered here so that ``--encoding representative`` selects it and ``p2smt encodings`` lists its options.
"""

from __future__ import annotations

from p2smt.smt.base import EncodingSpec
from p2smt.smt.representative import RepresentativeOptions, solve

ENCODING = EncodingSpec(
    name="representative",
    description="solves with every level of size 2, checks each program at the real size, refines sizes",
    options=RepresentativeOptions,
    factory=None,
    wrapper=solve,
)
