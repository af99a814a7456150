"""``p2smt recheck DIR``: cvc5 re-checks each certificate file ``synth --certificate DIR`` wrote."""

from __future__ import annotations

import json

import pytest

import p2smt

pytest.importorskip("cvc5")

REQUEST = ("--system", "fig2-16gpu", "--axes", "4,4", "--reduce", "0", "--matrix", "[[1,2,1,2],[1,1,2,2]]",
           "--max-len", "3")


@pytest.fixture
def certificates(run_cli, tmp_path):
    folder = tmp_path / "cert"
    rc, _, err = run_cli("synth", *REQUEST, "--certificate", folder)
    assert rc == 0, err
    files = sorted(folder.glob("*.smt2"))
    assert files
    return folder, files


def test_every_file_confirmed(run_cli, certificates):
    folder, files = certificates
    rc, out, err = run_cli("recheck", folder)
    assert rc == 0, err
    assert out.count("CONFIRMED") == len(files)
    assert f"{len(files)} certificate file{'s' if len(files) > 1 else ''}: {len(files)} confirmed by cvc5" in out
    rc, out, _ = run_cli("recheck", folder, "--json")
    payload = json.loads(out)
    assert rc == 0 and payload["confirmed"] == len(files) and payload["refuted"] == payload["unknown"] == 0
    assert {f["verdict"] for f in payload["files"]} == {"confirmed"}


def test_a_flipped_status_is_refuted(run_cli, certificates):
    folder, files = certificates
    text = files[0].read_text()
    flipped = text.replace(":status unsat)", ":status sat)") if ":status unsat)" in text else \
        text.replace(":status sat)", ":status unsat)")
    files[0].write_text(flipped)
    rc, out, _ = run_cli("recheck", folder)
    assert rc == 1
    assert f"REFUTED {files[0].name}" in out


def test_no_answer_is_unknown(run_cli, tmp_path):
    # a file cvc5 cannot read gives no answer: unknown, exit 4
    (tmp_path / "q.smt2").write_text("(set-info :status unsat)\n(set-logic ALL)\n(assert (undeclared x))\n"
                                     "(check-sat)\n")
    rc, out, _ = run_cli("recheck", tmp_path)
    assert rc == 4
    assert "UNKNOWN q.smt2" in out and "cvc5 cannot read it" in out


@pytest.mark.parametrize(("files", "message"), [
    ({}, "holds no certificate files (*.smt2)"),
    ({"x.smt2": "(set-logic ALL)\n(check-sat)\n"}, "x.smt2: not a certificate file"),
])
def test_bad_folders_refused(run_cli, tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    rc, out, err = run_cli("recheck", tmp_path)
    assert (rc, out) == (2, "")
    assert message in err and err.count("\n") == 1


def test_missing_folder_refused(run_cli, tmp_path):
    rc, _, err = run_cli("recheck", tmp_path / "none")
    assert rc == 2 and "does not exist; give the folder given to --certificate" in err


def test_api(certificates):
    folder, files = certificates
    assert "recheck" in p2smt.__all__
    seen = []
    results = p2smt.recheck(folder, report=seen.append)
    assert [r.file for r in results] == [f.name for f in files] == [r.file for r in seen]
    assert all(r.verdict.value == "confirmed" and r.answer == r.expected for r in results)


# ---------------------------------------------------------------- issue 35, item 11

BUDGET_1 = ("--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]",
            "--proof", "bmc", "--proof-budget", "1", "--json")


def test_certificate_certifies_what_synth_certifies_without_it(run_cli, tmp_path):
    # a request certified within a budget of 1 M units; with --certificate it once failed (exit 2: a
    # standard form re-solved from scratch past the budget) and left a partial certificate
    rc, out, _ = run_cli("synth", *BUDGET_1)
    assert rc == 0 and json.loads(out)["matrices"][0]["certified"] is True
    folder = tmp_path / "cert"
    rc, out, err = run_cli("synth", *BUDGET_1, "--certificate", folder)
    assert rc == 0, err
    assert json.loads(out)["matrices"][0]["certified"] is True
    rc, out, _ = run_cli("recheck", folder, "--json")
    assert rc == 0 and json.loads(out)["refuted"] == json.loads(out)["unknown"] == 0


def test_a_failed_certificate_leaves_no_partial_files(run_cli, tmp_path, monkeypatch):
    from p2smt.errors import P2Error
    from p2smt.smt import certify

    written = certify.CertificateSink._standard
    calls = []

    def fails_second(self, kind, formulas):
        calls.append(kind)
        if len(calls) == 2:
            raise P2Error("--certificate: Z3 gives no answer on the standard form of a test query")
        return written(self, kind, formulas)

    monkeypatch.setattr(certify.CertificateSink, "_standard", fails_second)
    folder = tmp_path / "cert"
    rc, out, err = run_cli("synth", *BUDGET_1, "--certificate", folder)
    assert (rc, out) == (2, "")
    assert err == "p2smt: error: --certificate: Z3 gives no answer on the standard form of a test query\n"
    assert len(calls) == 2 and list(folder.glob("*")) == []
