"""docs/semantics.md §4 as SMT-LIB2 (QF_BV), and the ground query that proves a certificate's lemmas (trusted).

A device state is a ``k²``-bit vector, bit ``r·k + c`` true when chunk ``r`` holds contribution ``c``.
For each collective ``C`` and group size ``m`` the text defines ``pre_C_m`` (the preconditions, as the
conjunction of the negated failure facts below) and ``rel_C_m`` (the members' outputs). A step lemma
says ``pre ∧ rel ∧ progress`` on its states; a fact lemma says the fact, so it breaks a conjunct of
``pre``; a progress lemma says ``rel(s, s)``. The query asserts that some lemma is false: ``unsat``
proves them all. Standard QF_BV only, so any SMT-LIB2 solver checks the same text."""

from __future__ import annotations

FACTS = {  # the failure facts: (parameters, body); pre_C_m is the conjunction of their negations
    "chunks_differ": ("(x R) (y R)", "(distinct x y)"),
    "overlap": ("(x S) (u S)", "(distinct (bvand x u) zero)"),
    "chunks_overlap": ("(x R) (u R)", "(distinct (bvand x u) zrows)"),
    "sizes_differ": ("(x R) (y R)", "(distinct (pop x) (pop y))"),
    "above_root": ("(x S) (r S)", "(distinct (bvand x (bvnot r)) zero)"),
    "indivisible": ("(x R) (m N)", "(distinct (bvurem (pop x) m) (_ bv0 {w}))"),
}
"""Arguments of sort R are chunk sets: a state's ``rows`` (its constant's ``rN``) or a union of them
(``rows`` of a union is the union of the ``rows``)."""


def _all(terms: list[str]) -> str:
    return "true" if not terms else terms[0] if len(terms) == 1 else f"(and {' '.join(terms)})"


def _numeral(value: int, width: int) -> str:
    return f"#x{value:0{width // 4}x}" if width % 4 == 0 else f"#b{value:0{width}b}"


def _prelude(k: int) -> list[str]:
    """Sorts, the zero constants, rows (the non-empty chunks), pop (their count), spread (chunks to a mask)
    and the failure facts."""
    w = 2 * k.bit_length() + 2  # holds m · |rows| for m, |rows| ≤ k
    kk = k * k
    rows = [f"(bvnot (bvcomp ((_ extract {r * k + k - 1} {r * k}) x) (_ bv0 {k})))" for r in reversed(range(k))]
    pop = [f"((_ zero_extend {w - 1}) ((_ extract {r} {r}) y))" for r in range(k)]
    spread = [f"((_ repeat {k}) ((_ extract {r} {r}) y))" for r in reversed(range(k))]
    out = [
        "(set-logic QF_BV)",
        "(set-info :status unsat)",
        f"(define-sort S () (_ BitVec {kk}))",
        f"(define-sort R () (_ BitVec {k}))",
        f"(define-sort N () (_ BitVec {w}))",
        f"(define-fun zero () S (_ bv0 {kk}))",
        f"(define-fun zrows () R (_ bv0 {k}))",
        f"(define-fun rows ((x S)) R {_join('concat', rows)})",
        f"(define-fun pop ((y R)) N {_join('bvadd', pop)})",
        f"(define-fun spread ((y R)) S {_join('concat', spread)})",
    ]
    out += [f"(define-fun {name} ({params}) Bool {body.format(w=w)})" for name, (params, body) in FACTS.items()]
    return out


def _join(op: str, terms: list[str]) -> str:
    """``(op t1 t2 …)``, or the one term alone (an n-ary op needs two)."""
    return terms[0] if len(terms) == 1 else f"({op} {' '.join(terms)})"


def _prefixes(m: int, var: str, op: str, first: str, body: str, conjuncts) -> str:
    """``body`` under lets ``{var}1 … {var}{m-1}``: ``{var}a`` is the ``op`` of members 0..a-1 (``first(t)``
    member t), and ``conjuncts(a)`` the a-th conjunct; the running union, not m² terms."""
    parts = [c for a in range(1, m) for c in conjuncts(a)]
    text = _all(parts + ([body] if body else []))
    for a in reversed(range(1, m)):
        value = first(0) if a == 1 else f"({op} {var}{a - 1} {first(a - 1)})"
        text = f"(let (({var}{a} {value})) {text})"
    return text


def _params(m: int, *prefixes: str) -> str:
    return " ".join(f"({p}{t} {'R' if p in ('r', 'q') else 'S'})" for p in prefixes for t in range(m))


def _pre(coll: str, m: int, w: int) -> str:
    """``pre_C_m`` over members ``s`` and their chunk sets ``r``: §4's preconditions of ``coll``."""
    if coll in ("AllReduce", "ReduceScatter", "Reduce"):
        div = f"(not (indivisible r0 (_ bv{m} {w})))" if coll == "ReduceScatter" else ""
        body = _prefixes(m, "u", "bvor", lambda t: f"s{t}", div, lambda a: [
            f"(not (chunks_differ r{a} r0))", f"(not (overlap s{a} u{a}))"])
    elif coll == "AllGather":
        body = _prefixes(m, "v", "bvor", lambda t: f"r{t}", "", lambda a: [
            f"(not (chunks_overlap r{a} v{a}))", f"(not (sizes_differ r{a} r0))"])
    else:  # Broadcast
        body = _all([f"(not (above_root s{a} s0))" for a in range(1, m)]
                    + [f"(not {_all([f'(= s{a} s0)' for a in range(1, m)])})"])
    return f"(define-fun pre_{coll}_{m} ({_params(m, 's', 'r')}) Bool {body})"


def _rel(coll: str, m: int, w: int) -> str:
    """``rel_C_m``: the outputs ``o`` (chunk sets ``q``) of the members ``s`` (``r``); ReduceScatter's stated
    as a check: each output is the union on whole chunks of it, and the outputs' chunks cut the union's
    into m equal blocks, each below the next."""
    union = _join("bvor", [f"s{t}" for t in range(m)])
    o = [f"o{t}" for t in range(m)]
    if coll in ("AllReduce", "AllGather"):
        parts = [f"(= {x} {union})" for x in o]
    elif coll == "Reduce":
        parts = [f"(= o0 {union})"] + [f"(= {x} zero)" for x in o[1:]]
    elif coll == "Broadcast":
        parts = [f"(= {x} s0)" for x in o]
    else:
        chunks = _join("bvor", [f"r{t}" for t in range(m)])
        parts = [f"(= {_join('bvor', [f'q{t}' for t in range(m)])} {chunks})"]
        parts += [f"(= o{t} (bvand {union} (spread q{t})))" for t in range(m)]
        parts += [f"(= (bvmul (pop q{t}) (_ bv{m} {w})) (pop {chunks}))" for t in range(m)]
        parts += [f"(=> (distinct q{t + 1} zrows) (bvult q{t} (bvand q{t + 1} (bvneg q{t + 1}))))" for t in range(m - 1)]
        parts = [_prefixes(m, "c", "bvor", lambda t: f"q{t}", _all(parts),
                           lambda a: [f"(= (bvand q{a} c{a}) zrows)"])]
    return f"(define-fun rel_{coll}_{m} ({_params(m, 's', 'r', 'o', 'q')}) Bool {_all(parts)})"


def _progress(m: int) -> str:
    return f"(define-fun progress_{m} ({_params(m, 's', 'o')}) Bool {_join('or', [f'(distinct o{t} s{t})' for t in range(m)])})"


def lemma_text(lemma: tuple, name, w: int) -> str:
    """One lemma as a Boolean term over the device constants (``name(value)`` is a state's constant ``dN``,
    its chunk set ``rN``)."""
    def states(xs) -> str:
        return " ".join(name(x) for x in xs)

    def chunks(xs) -> str:
        return " ".join("r" + name(x)[1:] for x in xs)

    kind = lemma[0]
    if kind == "step":
        _, coll, src, dst = lemma
        m, a, b = len(src), f"{states(src)} {chunks(src)}", f"{states(dst)} {chunks(dst)}"
        return f"(and (pre_{coll}_{m} {a}) (rel_{coll}_{m} {a} {b}) (progress_{m} {states(src)} {states(dst)}))"
    if kind == "progress":
        _, coll, src = lemma
        a = f"{states(src)} {chunks(src)}"
        return f"(rel_{coll}_{len(src)} {a} {a})"
    if kind == "information_increase":
        return _all([f"(= {name(x)} {name(lemma[1])})" for x in lemma[2]])
    if kind == "disjoint":
        return f"(overlap {name(lemma[1])} {_join('bvor', [name(x) for x in lemma[2]])})"
    if kind == "disjoint_chunks":
        return f"(chunks_overlap {chunks([lemma[1]])} {_join('bvor', chunks(lemma[2]).split())})"
    if kind == "divisible":
        return f"(indivisible {chunks([lemma[2]])} (_ bv{lemma[1]} {w}))"
    if kind == "below_root":
        return f"(above_root {name(lemma[2])} {name(lemma[1])})"
    fact = {"same_chunks": "chunks_differ", "equal_sizes": "sizes_differ"}[kind]
    return f"({fact} {chunks([lemma[2]])} {chunks([lemma[1]])})"  # member a against member 0


def query(lemmas: list[tuple], k: int) -> tuple[str, list[str]]:
    """The SMT-LIB2 text asserting that some lemma is false (``unsat``: all proved), and each lemma's term."""
    w = 2 * k.bit_length() + 2
    consts: dict[int, str] = {}

    def name(value: int) -> str:
        found = consts.get(value)
        if found is None:
            found = consts[value] = f"d{len(consts)}"
        return found

    terms, shapes = [], set()
    for lemma in lemmas:
        if lemma[0] in ("step", "progress"):
            shapes.add((lemma[1], len(lemma[2])))
        terms.append(lemma_text(lemma, name, w))
    lines = _prelude(k)
    for v, n in consts.items():
        lines += [f"(define-fun {n} () S {_numeral(v, k * k)})", f"(define-fun r{n[1:]} () R (rows {n}))"]
    for coll, m in sorted(shapes):
        lines += [_pre(coll, m, w), _rel(coll, m, w)]
    lines += [_progress(m) for m in sorted({m for _, m in shapes})]
    lines += [f"(define-fun lemma{i} () Bool {t})" for i, t in enumerate(terms)]
    lines.append(f"(assert (not {_all([f'lemma{i}' for i in range(len(terms))])}))")
    lines.append("(check-sat)")
    return "\n".join(lines) + "\n", terms
