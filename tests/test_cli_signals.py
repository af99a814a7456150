"""Stopping and output failures of the real command line (issue 35 items 1-3 and 10): each test runs
``python -m p2smt`` as a child process, signals it or points its output somewhere that fails, and checks
the exit code, the one line on stderr and that no process of the command outlives it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, sends POSIX signals")

P2SMT = [sys.executable, "-m", "p2smt"]
SYNTH = ["synth", "--system", "a100-4x16", "--axes", "8,2,4", "--reduce", "0,2", "--hierarchy", "b", "--max-len", "3"]
SMALL = ["synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]",
         "--max-len", "2"]
RUN = ["run", "--system", "v100-2x8", "--nodes", "1", "--axes", "8", "--reduce", "0", "--matrix", "[[1,8]]",
       "--program", "(root, InsideGroup, AllReduce)", "--repeats", "10000000"]
WORKERS = {"torch": 9, "jax": 1}  # processes a run starts: torch's launcher and its 8 ranks; JAX's one worker
WAIT_S = 240  # the longest a step may take on a loaded machine (never asserted as a time)


def start(argv, **kw) -> subprocess.Popen:
    """The command in a session of its own, as a shell starts a job (a Ctrl-C goes to its whole group)."""
    return subprocess.Popen([*P2SMT, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)


def wait_for_line(proc: subprocess.Popen, pattern: str) -> list[str]:
    """Read stderr until a line matches ``pattern`` (the lines read); fails if the command ends first."""
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if re.search(pattern, line):
            return lines
    pytest.fail(f"the command ended (exit {proc.wait()}) before printing {pattern!r}: {''.join(lines)[-2000:]}")


def stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a live process, None once it is gone (a zombie counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[1]), fields[0]) if fields[0] not in "ZX" else None


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (in any session: the workers start sessions of their own)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := stat(int(entry))) is not None:
            parents[int(entry)] = st[0]
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def wait_for_workers(proc: subprocess.Popen, count: int) -> set[int]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        kids = descendants(proc.pid)
        if len(kids) >= count:
            return kids
        assert proc.poll() is None, f"the run ended early: {proc.communicate()}"
        time.sleep(0.2)
    pytest.fail(f"the run did not start its {count} workers")


def survivors(pids: set[int], grace_s: float = 30) -> set[int]:
    """The processes of ``pids`` still alive after at most ``grace_s`` (killed, so a failure leaves none)."""
    deadline = time.monotonic() + grace_s
    while (alive := {p for p in pids if stat(p) is not None}) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    return alive


def send(proc: subprocess.Popen, signum: int, group: bool) -> None:
    (os.killpg if group else os.kill)(proc.pid, signum)


# ------------------------------------------------------------------ item 1: stopping certified synthesis

@pytest.mark.parametrize("signum, group, code, words", [
    (signal.SIGINT, True, 130, "interrupted (Ctrl-C)"),  # a terminal's Ctrl-C: the whole foreground group
    (signal.SIGTERM, False, 143, "stopped by SIGTERM"),  # kill PID: the command alone
])
def test_a_signal_stops_certified_synthesis_and_says_what_was_finished(signum, group, code, words):
    """The signal lands while Z3 proves the second placement complete: the command stops, names the
    placements done, and no proof is reported as timed out."""
    proc = start([*SYNTH, "--progress"])
    wait_for_line(proc, r"synth: placements: 1/\d+ done")
    send(proc, signum, group)
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == code, err
    assert out == ""
    assert err.splitlines()[-1] == f"p2smt: {words}: synth: placements: 1/5 done"
    assert "timed out" not in err and "Traceback" not in err


def test_ctrl_c_stops_a_run_under_a_deadline():
    """Under --deadline the work runs in a forked child: Ctrl-C reaches both; the child leaves it to the parent."""
    proc = start([*SYNTH, "--progress", "--deadline", "3600"])
    wait_for_line(proc, r"synth: placements: 1/\d+ done")
    kids = descendants(proc.pid)
    send(proc, signal.SIGINT, group=True)
    try:
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        left = survivors(kids)
    assert (proc.returncode, out) == (130, ""), err
    assert err.splitlines()[-1] == "p2smt: interrupted (Ctrl-C): synth: placements: 1/5 done"
    assert "Traceback" not in err and not left


def test_an_unfinished_proof_stopped_by_a_signal_is_never_a_timeout(monkeypatch):
    """Inside the proof: once the stop flag is set, a proof without an answer raises instead of reading
    as a timeout; so does a check Z3's own Ctrl-C handler stopped; a limit or a caller's timer does not."""
    from p2smt import interrupts
    from p2smt.smt.budget import ResourceBudget
    from p2smt.smt.certify import unfinished

    spend = ResourceBudget(None)
    assert unfinished("completeness", spend) == "a completeness query timed out"
    spend.reason = "canceled"  # what Z3 says when its resource limit stops a check
    assert "timed out" in unfinished("completeness", spend)
    spend.reason = "interrupted"  # an interrupt of the context, without a stop signal: a caller's timer
    assert "timed out" in unfinished("completeness", spend)
    spend.reason = "interrupted from keyboard"  # Z3's own Ctrl-C handler (a library caller's process)
    with pytest.raises(KeyboardInterrupt):
        unfinished("completeness", spend)
    monkeypatch.setattr(interrupts, "_received", signal.SIGTERM)
    assert interrupts.interrupted_reason("interrupted") and not interrupts.interrupted_reason("timeout")
    with pytest.raises(interrupts.Interrupted) as stopped:
        unfinished("validity", ResourceBudget(None))
    assert stopped.value.exit_code == 143
    assert not ResourceBudget(10).arm(None)  # no check starts after a stop signal (a worker thread's proof ends)


# ------------------------------------------------------------------ item 2: no process outlives a run

@pytest.mark.parametrize("backend, signum, group, code", [
    ("torch", signal.SIGINT, True, 130),
    ("jax", signal.SIGTERM, False, 143),
    ("torch", signal.SIGKILL, False, -signal.SIGKILL),
    pytest.param("torch", signal.SIGTERM, False, 143, marks=pytest.mark.slow),
    pytest.param("jax", signal.SIGINT, True, 130, marks=pytest.mark.slow),
    pytest.param("jax", signal.SIGKILL, False, -signal.SIGKILL, marks=pytest.mark.slow),
])
def test_no_worker_outlives_a_stopped_run(backend, signum, group, code, tmp_path):
    """The workers start sessions of their own (a Ctrl-C never reaches them): the command kills them, and
    when it is killed itself (SIGKILL, no cleanup), they notice their parent's death and end. The run's
    temporary folder goes with the command, except after SIGKILL."""
    pytest.importorskip(backend)
    proc = start([*RUN, "--backend", backend], env=os.environ | {"TMPDIR": str(tmp_path)})
    kids = wait_for_workers(proc, WORKERS[backend])
    send(proc, signum, group)
    try:
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        left = survivors(kids)  # killed now: a failing test leaves none behind
    assert not left, f"{len(left)} processes of the command outlived it"
    assert proc.returncode == code, err
    assert (list(tmp_path.iterdir()) == []) is (signum != signal.SIGKILL)
    if signum != signal.SIGKILL:
        words = "interrupted (Ctrl-C)" if signum == signal.SIGINT else "stopped by SIGTERM"
        assert err.splitlines()[-1] == (f"p2smt: {words}: the {backend} run on 8 devices was stopped, "
                                        "its worker processes killed")
        assert out == ""


# ------------------------------------------------------------------ item 3: output that cannot be written

@pytest.mark.parametrize("json", [False, True])
def test_a_full_disk_is_one_line_and_exit_2(json):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*P2SMT, *SMALL, *(["--json"] if json else [])], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=WAIT_S, check=False)
    assert (proc.returncode, proc.stderr) == (2, "p2smt: error: cannot write output: No space left on device\n")


def test_an_encoding_without_a_character_is_one_line_and_exit_2():
    proc = subprocess.run([*P2SMT, *SMALL], capture_output=True, text=True, timeout=WAIT_S, check=False,
                          env=os.environ | {"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 2
    assert proc.stderr.startswith("p2smt: error: cannot write output: the output encoding 'ascii' has no ")
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""  # the lines before it are not half-printed


def test_a_closed_stdout_is_refused():
    proc = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *P2SMT, *SMALL], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=WAIT_S, check=False)
    assert (proc.returncode, proc.stderr) == (2, "p2smt: error: cannot write output: standard output is closed\n")


def test_a_reader_that_goes_away_from_the_tables_is_a_quiet_exit_0():
    """As for --json (test_cli_edges): the human tables, cut by ``| head``, end quietly with exit 0."""
    proc = subprocess.Popen([*P2SMT, "placements", "--system", "h100-superpod", "--axes", "2,2,2,2,2,2,2,2,2,2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read()
    assert (proc.wait(timeout=WAIT_S), err) == (0, b"")


def long_program(tmp_path: Path) -> Path:
    """4,096 steps, the interpreter's failing step far from the first (its prefix is proved first)."""
    path = tmp_path / "long.txt"
    path.write_text("; ".join(["(node, InsideGroup, AllReduce)"] + ["(node, Parallel(root), AllReduce)"] * 4095))
    return path


VERIFY = ["verify", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]",
          "--values", "--allow-noop"]


def test_ctrl_c_while_z3_builds_a_long_proof_is_one_line(tmp_path):
    """Ctrl-C while the values proof encodes its steps (Z3 calls back into Python there): exit 130, one
    line, no ctypes error."""
    proc = start([*VERIFY, "--program", f"@{long_program(tmp_path)}", "--progress"])
    wait_for_line(proc, r"verify: steps proved: 1/4096 done")
    send(proc, signal.SIGINT, group=True)
    out, err = proc.communicate(timeout=WAIT_S)
    assert (proc.returncode, out) == (130, "")
    assert err.splitlines()[-1].startswith("p2smt: interrupted (Ctrl-C): verify: steps proved: ")
    assert "Traceback" not in err and "ArgumentError" not in err and "ignored" not in err


# ------------------------------------------------------------------ item 10: --timeout is wall clock

def test_timeout_bounds_a_long_values_proof_and_says_so(tmp_path):
    proc = subprocess.run([*P2SMT, *VERIFY, "--program", f"@{long_program(tmp_path)}", "--timeout", "1", "--json"],
                          capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert proc.returncode == 4, proc.stderr
    import json

    result = json.loads(proc.stdout)
    assert result["status"] == "unknown" and result["message"].startswith("the proof's 1 s ran out")


def test_no_encoding_is_built_once_the_proof_time_is_spent(monkeypatch):
    """The overrun of --timeout is bounded by one piece: the prefix proved first may spend the time, and
    then the whole plan's encoding (seconds for thousands of steps) is not started."""
    from p2smt.model.collectives import Collective
    from p2smt.smt import cegis
    from p2smt.smt.verify import ProofClock

    def never(*args, **kw):
        raise AssertionError("an encoding was built after the proof's time ran out")

    monkeypatch.setattr(cegis, "plan_checker", never)
    clock = ProofClock(1000, start=time.monotonic() - 2)
    steps = [(Collective.ALL_REDUCE, [(0, 1)])] * 3
    proof = cegis._verify(steps, 2, [(0, 1)], False, None, (), clock, time.perf_counter(), 3, prefix=False)
    assert proof.status == "unknown" and proof.stats["steps_encoded"] == 0
    assert proof.message == ("the proof's 1 s ran out before the encoding of 3 steps was built; "
                             "no step proved valid, step 1 undecided")
