"""Paths the user names: outputs written through what they name (a link's target, a device, a FIFO with a
reader) and never replacing what is not a regular file; inputs refused unless regular files, at once."""

from __future__ import annotations

import json
import os
import select
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from p2smt.errors import P2Error

REQ = ("--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]")
PROGRAM = "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)"
LOWER = ("lower", "--backend", "jax", *REQ, "--program", PROGRAM)
DRAW = ("draw", "--system", "v100-2x8")
PLAN = ("plan", "--profile", "resnet50-dp", "--system", "v100-2x8")


def one_line(err: str) -> str:
    """The single line of an error report (asserting there is exactly one)."""
    assert err.count("\n") == 1, err
    return err.strip()


def run_process(*argv: str, timeout: float = 120) -> tuple[int, str, str]:
    """The CLI in a child process: a test of something that used to hang fails instead of hanging."""
    done = subprocess.run([sys.executable, "-m", "p2smt", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, check=False)
    return done.returncode, done.stdout, done.stderr


def read_fifo(path: Path) -> tuple[threading.Thread, list[bytes]]:
    """A reader of the FIFO ``path`` on a thread (opened before this returns), and what it will have read."""
    got: list[bytes] = []
    opened = threading.Event()

    def reader() -> None:
        # non-blocking: the open counts as a reader at once; poll waits for a writer's data (a read before any
        # writer came would see an end of file), and the end is a read of nothing once the writer is gone
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        opened.set()
        waiting, chunks = select.poll(), []
        waiting.register(fd, select.POLLIN)
        while waiting.poll(60_000):
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
        os.close(fd)
        got.append(b"".join(chunks))

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert opened.wait(10)
    return thread, got


# ---------------------------------------------------------------- 5: outputs are written through, never replaced


@pytest.mark.parametrize("argv", [LOWER, DRAW])
def test_output_to_a_symlink_writes_its_target(run_cli, tmp_path, argv):
    target, link = tmp_path / "target.png", tmp_path / "link.png"
    target.write_text("old")
    link.symlink_to(target.name)
    rc, _, err = run_cli(*argv, "--out", link)
    assert rc == 0, err
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_bytes() != b"old" and target.stat().st_size > 100


def test_plan_png_to_a_symlink_writes_its_target(run_cli, tmp_path):
    target, link = tmp_path / "chart.png", tmp_path / "link.png"
    target.write_text("old")
    link.symlink_to(target)
    rc, _, err = run_cli(*PLAN, "--png", link, "--json")
    assert rc == 0, err
    assert link.is_symlink() and target.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(("argv", "flag"), [(LOWER, "--out"), (DRAW, "--out"), (PLAN, "--png")])
def test_a_character_device_is_written_through(run_cli, argv, flag):
    before = os.stat("/dev/null")
    rc, _, err = run_cli(*argv, flag, "/dev/null")
    assert rc == 0, err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize(("argv", "flag"), [(LOWER, "--out"), (DRAW, "--out")])
def test_a_full_device_is_an_error_and_stays_a_device(run_cli, argv, flag):
    before = os.stat("/dev/full")
    rc, _, err = run_cli(*argv, flag, "/dev/full")
    assert rc == 2
    assert one_line(err) == f"p2smt: error: {flag} '/dev/full': cannot write: No space left on device"
    after = os.stat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_a_fifo_with_a_reader_is_written_through(run_cli, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    thread, got = read_fifo(fifo)
    rc, _, err = run_cli(*LOWER, "--out", fifo)
    thread.join(30)
    assert rc == 0, err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert got and got[0].startswith(b'"""JAX lowering')


@pytest.mark.parametrize(("argv", "flag"), [(LOWER, "--out"), (DRAW, "--out")])
def test_a_fifo_with_no_reader_is_refused_at_once(tmp_path, argv, flag):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    rc, out, err = run_process(*argv, flag, fifo)
    assert (rc, out) == (2, "")
    assert one_line(err) == (f"p2smt: error: {flag} '{fifo}' is a FIFO with no reader; start its reader first "
                             "or give a regular file")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and sorted(tmp_path.iterdir()) == [fifo]


def test_a_directory_is_refused(run_cli, tmp_path):
    rc, _, err = run_cli(*LOWER, "--out", tmp_path)
    assert rc == 2
    assert one_line(err) == (f"p2smt: error: --out '{tmp_path}' is a directory; give a regular file, a character "
                             "device or a FIFO")


def test_a_regular_file_keeps_its_mode_and_no_temporary_file_is_left(run_cli, tmp_path):
    out = tmp_path / "m.py"
    out.write_text("old")
    out.chmod(0o600)
    assert run_cli(*LOWER, "--out", out)[0] == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and out.read_text().startswith('"""JAX lowering')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]


# ---------------------------------------------------------------- 6: names from files are data


def _system(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "s.yaml"
    link = {"kind": "nvlink", "bandwidth_gbps": 100, "latency_us": 1}
    path.write_text(json.dumps({"name": name, "levels": [{"name": "node", "size": 2}, {"name": "gpu", "size": 2}],
                                "interconnects": [{"name": "nv", "joins": ["gpu"], **link},
                                                  {"name": "net", "joins": ["node"], **link, "kind": "network"}]}))
    return path


@pytest.mark.parametrize(("name", "message"), [
    ("../../escaped", ("a system name must not contain a slash or a backslash, nor be '.' or '..', got "
                       "'../../escaped'")),
    ("", "a system name must not be empty"),
    ("red\x1b[31m", "a system name must be printable (no control characters), got 'red\\x1b[31m'"),
])
def test_draw_refuses_a_system_name_that_is_not_a_name(run_cli, tmp_path, monkeypatch, name, message):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    path = _system(tmp_path, name)
    rc, out, err = run_cli("draw", "--system", path)
    assert (rc, out) == (2, "")
    assert one_line(err) == f"p2smt: error: {path}: field name: Value error, {message}"
    assert "\x1b" not in err
    assert list(tmp_path.rglob("*.png")) == []


def test_draw_default_name_is_the_system_name_in_the_current_folder(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _system(tmp_path, "my cluster")
    rc, out, _ = run_cli("draw", "--system", path)
    assert rc == 0 and out == "wrote my cluster.png\n" and (tmp_path / "my cluster.png").is_file()


# ---------------------------------------------------------------- 9: FIFOs as inputs fail at once


@pytest.mark.parametrize("flag", ["--plan", "--program"])
def test_a_fifo_as_input_is_refused_at_once(tmp_path, flag):
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    rc, out, err = run_process("check", *REQ, flag, fifo if flag == "--plan" else f"@{fifo}")
    assert (rc, out) == (2, "")
    assert one_line(err) == f"p2smt: error: {flag} file '{fifo}' is a FIFO, not a regular file"


def test_sweep_out_fifo_with_no_reader_is_refused_at_once(tmp_path):
    fifo = tmp_path / "sweep.jsonl"
    os.mkfifo(fifo)
    grid = tmp_path / "g.yaml"
    grid.write_text("systems: [v100-2x8]\naxes: [[16]]\nreductions: [[0]]\nmax_len: 2\n")
    rc, out, err = run_process("sweep", "--grid", grid, "--out", fifo, "--json")
    assert (rc, out) == (2, "")
    assert one_line(err) == (f"p2smt: error: results file '{fifo}' is a FIFO with no reader; start its reader "
                             "first or give a regular file")


def test_experiment_out_fifo_with_no_reader_is_refused_at_once(tmp_path):
    fifo = tmp_path / "results.jsonl"
    os.mkfifo(fifo)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("max_len: 1\nconfigs:\n  - levels: [2]\n")
    rc, out, err = run_process("experiment", "--encodings", "bitvec", "--configs", cfg, "--out", fifo, "--json")
    assert (rc, out) == (2, "")
    assert one_line(err) == (f"p2smt: error: results file '{fifo}' is a FIFO with no reader; start its reader "
                             "first or give a regular file")


def test_a_grid_sweep_to_dev_null_writes_through(run_cli, tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("systems: [v100-2x8]\naxes: [[16]]\nreductions: [[0]]\nmax_len: 2\nengine: pieces\n")
    rc, out, err = run_cli("sweep", "--grid", grid, "--out", "/dev/null", "--json", "--workers", "1")
    assert rc == 0, err
    assert json.loads(out)["finished"] == 1 and stat.S_ISCHR(os.stat("/dev/null").st_mode)


# ---------------------------------------------------------------- minor items


@pytest.mark.parametrize(("make", "kind"), [(os.mkfifo, "a FIFO"), (os.mkdir, "a directory")])
def test_a_system_file_that_is_not_regular_is_named_as_such(run_cli, tmp_path, make, kind):
    path = tmp_path / "s.yaml"
    make(path)
    rc, _, err = run_cli("draw", "--system", path)
    assert rc == 2
    assert one_line(err).endswith(f"'{path}' is {kind}, not a regular file") or "is a directory" in err


def test_draw_errors_name_the_users_path_not_a_temporary_one(run_cli, tmp_path, monkeypatch):
    from p2smt.model import draw

    def broken(system, path):
        raise P2Error(f"cannot lay out {path}")

    monkeypatch.setattr(draw, "draw_topology", broken)
    out = tmp_path / "pic.png"
    rc, _, err = run_cli(*DRAW, "--out", out)
    assert rc == 2
    assert one_line(err) == f"p2smt: error: cannot lay out {out}"
    assert list(tmp_path.iterdir()) == []


def test_draw_to_a_name_that_is_only_the_extension(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_cli(*DRAW, "--out", ".png")
    assert rc == 0, err
    assert (tmp_path / ".png").read_bytes().startswith(b"\x89PNG")


def test_a_json_plan_repeating_a_key_is_refused(run_cli, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text('[{"collective": "AllReduce", "replica_groups": [[0, 1]], "collective": "AllGather"}]')
    rc, _, err = run_cli("check", *REQ, "--plan", plan)
    assert rc == 2
    assert one_line(err) == f"p2smt: error: {plan}: the key 'collective' appears twice in one JSON object"


@pytest.mark.parametrize(("value", "message"), [
    ("@", "--program @: give a file name after @ (@FILE reads the text from FILE)"),
    ("", "--program is empty; give DSL text (instructions separated by ';') or @FILE"),
])
def test_program_at_and_empty(run_cli, value, message):
    rc, _, err = run_cli("check", *REQ, "--program", value)
    assert rc == 2
    assert one_line(err) == f"p2smt: error: {message}"


@pytest.mark.parametrize(("value", "message"), [
    ("true", "field bytes.0: Value error, a message size is a number of bytes or 'default', not true/false"),
    ("1.0e+16", "field bytes.0: Input should be less than or equal to 1000000000000000"),
    ("0", "field bytes.0: Input should be greater than 0"),
])
def test_grid_bytes_validated_as_the_flag(run_cli, tmp_path, value, message):
    grid = tmp_path / "g.yaml"
    grid.write_text(f"systems: [v100-2x8]\naxes: [[16]]\nreductions: [[0]]\nbytes: [{value}]\n")
    rc, _, err = run_cli("sweep", "--grid", grid, "--out", tmp_path / "o.jsonl")
    assert rc == 2
    assert f"p2smt: error: {grid}: {message}" in one_line(err)
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("argv", [
    (*LOWER, "--out"), (*DRAW, "--out"), (*PLAN, "--png"), ("sweep", "--grid", "small", "--out"),
    ("experiment", "--encodings", "bitvec", "--configs", "paper-grid", "--out"),
])
def test_an_empty_output_name_is_refused_alike(run_cli, argv):
    rc, out, err = run_cli(*argv, "")
    assert (rc, out) == (2, "")
    assert one_line(err).endswith(f"argument {argv[-1]}: expected a file name, got ''")


def test_a_wide_table_is_printed_whole():
    from rich.console import Console
    from rich.table import Table

    from p2smt.cli.sweep import whole

    table = Table()
    for i in range(12):
        table.add_column(f"column-{i}")
    table.add_row(*[f"value-number-{i}" for i in range(12)])
    narrow = Console(width=100, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    whole(narrow, table)
    assert "value-number-11" not in narrow.export_text()  # printed on a console of its own width
    wide = Console(width=400, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    whole(wide, table)
    text = wide.export_text()
    assert all(f"value-number-{i}" in text for i in range(12))


def test_verify_values_unknown_does_not_call_a_wrong_prefix_valid(run_cli, verify_hangs_at_step_3):
    """Under --values a step whose preconditions hold may already hold a wrong sum (AllReduce twice over
    one group doubles it): the steps done are said to apply, not to be valid."""
    twice = "(node, InsideGroup, AllReduce); (node, InsideGroup, AllReduce); (node, Parallel(root), AllReduce)"
    rc, out, _ = run_cli("verify", *REQ, "--values", "--program", twice, "--deadline", "2", "--json")
    payload = json.loads(out)
    assert rc == 4 and payload["steps_proved"] == 2
    assert payload["message"] == ("deadline of 2 s reached: steps 1..2 proved to apply (sums are checked at the "
                                  "goal), step 3 undecided")


def test_synth_says_why_a_placement_has_no_program(run_cli):
    rc, out, _ = run_cli("synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "0", "--hierarchy", "a",
                         "--matrix", "[[1,4],[4,4]]", "--engine", "pieces")
    text = " ".join(out.split())
    assert rc == 0 and "0 programs" in text
    assert ("no program: every instruction of this synthesis hierarchy has a group mixing devices of several "
            "reduction groups (its levels do not separate the reduced axes from the others); --hierarchy d, the "
            "default, splits each level by axis") in text
