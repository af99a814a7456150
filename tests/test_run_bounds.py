"""``p2smt run``'s up-front bounds: a size whose memory estimate exceeds ``--memory`` or whose least time exceeds
``--run-timeout`` is refused in one line (exit 2) before any worker starts; the estimates against the peaks
measured; the default length shrunk to fit; the missing-torch hint names the pinned CPU build."""

from __future__ import annotations

import pytest

import p2smt
from p2smt.errors import P2Error
from p2smt.lower import bounds
from p2smt.lower import run as running
from p2smt.lower.bounds import RunBudget, RunSize

GB = 1e9
SUPERPOD = ["--system", "h100-superpod", "--axes", "1024", "--reduce", "0", "--matrix", "[[4,32,4,2]]"]
AR = "(root, InsideGroup, AllReduce)"
SMALL = ["--system", "h100-superpod", "--level", "su=1", "--level", "node=2", "--axes", "16", "--reduce", "0",
         "--matrix", "[[1,2,4,2]]"]

# (backend, devices, length, steps, peak bytes of the worker processes measured: summed PSS; docs/usage.md)
MEASURED = [
    ("jax", 16, 4096, 1, 0.223 * GB), ("jax", 16, 1 << 20, 1, 1.330 * GB), ("jax", 16, 1 << 20, 4, 1.649 * GB),
    ("jax", 256, 16384, 1, 0.562 * GB), ("jax", 256, 65536, 1, 1.418 * GB), ("jax", 1024, 1024, 1, 0.429 * GB),
    ("jax", 1024, 16384, 1, 1.572 * GB), ("jax", 1024, 16384, 4, 1.723 * GB), ("jax", 1024, 65536, 1, 5.095 * GB),
    ("torch", 16, 1 << 20, 1, 0.772 * GB), ("torch", 16, 1 << 20, 2, 1.632 * GB), ("torch", 16, 1 << 20, 4, 1.879 * GB),
    ("torch", 64, 16384, 1, 0.638 * GB), ("torch", 64, 16384, 4, 0.927 * GB), ("torch", 128, 32768, 1, 1.295 * GB),
    ("torch", 256, 256, 1, 2.220 * GB), ("torch", 256, 16384, 1, 2.412 * GB), ("torch", 256, 256, 4, 2.760 * GB),
    ("torch", 512, 512, 1, 7.054 * GB),  # 512: stopped there at 245 s, still growing
]
# (devices, steps, seconds of a whole torch run measured; 512: stopped unfinished)
TORCH_SECONDS = [(64, 1, 5.4), (64, 4, 7.3), (128, 1, 12.7), (256, 1, 52.1), (256, 4, 219.4), (512, 1, 244.7)]


def one_line_refusal(rc: int, out: str, err: str, fragment: str) -> bool:
    lines = err.splitlines()
    return (rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("p2smt: error: ")
            and "Traceback" not in err and fragment in lines[0])


@pytest.fixture
def no_worker(monkeypatch):
    """A worker started fails the test: the refusals come before any."""

    def spawn(*_args, **_kwargs):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(running, "_spawn", spawn)


@pytest.mark.parametrize("backend, devices, length, steps, peak", MEASURED)
def test_the_memory_estimate_is_above_every_measured_peak_and_not_far(backend, devices, length, steps, peak):
    est = RunSize(backend, devices, 1, steps).bytes(length)
    assert peak <= est <= 3 * peak


@pytest.mark.parametrize("devices, steps, seconds", TORCH_SECONDS)
def test_the_torch_time_estimate_is_below_every_measured_run(devices, steps, seconds):
    assert RunSize("torch", devices, 1, steps).least_seconds() <= seconds
    assert RunSize("jax", devices, 1, steps).least_seconds() == 0


def test_the_new_users_superpod_run_is_refused_before_any_worker(run_cli, no_worker, tmp_path):
    rc, out, err = run_cli("run", "--backend", "jax", *SUPERPOD, "--program", AR, "--length", "262144",
                           "--memory", "11.8", "--json")
    assert one_line_refusal(rc, out, err, "jax on 1,024 devices, length 262,144: the run needs about 25.5 GiB")
    assert "more than --memory 11.8 GiB; use a --length of at most 117,760, fewer devices or a larger --memory" in err


def test_torch_at_1024_devices_is_refused_for_memory_and_then_for_time(run_cli, no_worker):
    rc, out, err = run_cli("run", "--backend", "torch", *SUPERPOD, "--program", AR, "--memory", "11.8")
    assert one_line_refusal(rc, out, err, "torch on 1,024 devices, length 1,024: the run needs about 30.3 GiB")
    assert "use fewer devices or a larger --memory" in err
    rc, out, err = run_cli("run", "--backend", "torch", *SUPERPOD, "--program", AR, "--memory", "100")
    assert one_line_refusal(rc, out, err, "the run takes at least about 629 s by its estimate, more than "
                                          "--run-timeout 600 s; use fewer devices or a larger --run-timeout")


def test_no_length_fits_names_the_shortest(run_cli, no_worker):
    rc, out, err = run_cli("run", "--backend", "jax", *SUPERPOD, "--program", AR, "--length", "2048",
                           "--memory", "0.5")
    assert one_line_refusal(rc, out, err, "use fewer devices (even --length 1,024, one element a chunk, needs 0.60 GiB)")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "lots"])
def test_bad_memory_values_are_refused(run_cli, no_worker, value):
    rc, out, err = run_cli("run", "--backend", "jax", *SMALL, "--program", AR, "--memory", value)
    assert rc == 2 and out == "" and "--memory" in err and "Traceback" not in err


def test_the_api_raises(no_worker):
    req = p2smt.Request("h100-superpod", axes=(1024,), reduce=(0,), matrix=((4, 32, 4, 2),))
    with pytest.raises(P2Error, match=r"more than --memory 2 GiB"):
        p2smt.run(req, AR, backend="jax", memory_gib=2, length=32768)
    with pytest.raises(P2Error, match=r"--memory must be a positive number"):
        p2smt.run(req, AR, backend="jax", memory_gib=-1)


def test_the_default_length_shrinks_to_fit():
    roomy = RunBudget(12 << 30, "test", 600.0)
    assert roomy.default_length(RunSize("jax", 16, 16)) == 16 * 256  # small sizes keep 256 elements a chunk
    assert roomy.default_length(RunSize("jax", 256, 256)) == 256 * 256
    assert roomy.default_length(RunSize("jax", 1024, 1024)) == 16 * 1024  # 2^24 elements in all
    assert roomy.default_length(RunSize("jax", 1024, 8, 3)) == 2048
    tight = RunBudget(1 << 30, "test", 600.0)
    size = RunSize("jax", 1024, 1024)
    length = tight.default_length(size)
    assert length % 1024 == 0 and 1024 < length < 16 * 1024
    assert size.bytes(length) <= 1 << 30 < size.bytes(length + 1024)
    assert RunBudget(1 << 20, "test", 600.0).default_length(size) == 1024  # check refuses it
    torch = RunSize("torch", 256, 256, 4)
    assert torch.bytes(roomy.default_length(torch)) <= 12 << 30


def test_the_default_budget_is_half_the_ram_or_less_when_less_is_free(monkeypatch):
    from p2smt.smt import memory

    monkeypatch.setattr(memory, "machine_bytes", lambda: 24 << 30)
    monkeypatch.setattr(bounds, "available_bytes", lambda: 23 << 30)
    budget = RunBudget.of(None, 600.0)
    assert budget.nbytes == 12 << 30 and "half the machine's RAM" in budget.source
    monkeypatch.setattr(bounds, "available_bytes", lambda: 5 << 30)
    budget = RunBudget.of(None, 600.0)
    assert budget.nbytes == int((5 << 30) * 0.8) and "80% of the memory available now" in budget.source
    assert RunBudget.of(3, 600.0).source == "--memory 3 GiB"


def test_the_default_length_does_not_depend_on_the_load(monkeypatch):
    """Only the refusal reads the memory free now; the default length is chosen from --memory or its default."""
    from p2smt.smt import memory

    monkeypatch.setattr(memory, "machine_bytes", lambda: 24 << 30)
    size = RunSize("jax", 1024, 1024)
    lengths = []
    for free in (23 << 30, 1 << 30):
        monkeypatch.setattr(bounds, "available_bytes", lambda free=free: free)
        lengths.append(RunBudget.of(None, 600.0).default_length(size))
    assert lengths[0] == lengths[1] == 16 * 1024


def test_the_missing_torch_hint_names_the_pinned_cpu_build(run_cli, monkeypatch, no_worker):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    rc, out, err = run_cli("run", "--backend", "torch", *SMALL, "--program", AR)
    assert one_line_refusal(rc, out, err, "pip install 'p2smt[torch]' --extra-index-url "
                                          "https://download.pytorch.org/whl/cpu")
    assert "pip install torch" not in err


def test_a_small_run_still_works():
    pytest.importorskip("jax")
    req = p2smt.Request("h100-superpod", axes=(16,), reduce=(0,), matrix=((1, 2, 4, 2),),
                        levels={"su": 1, "node": 2})
    report = p2smt.run(req, AR, backend="jax", memory_gib=1, timeout=240)
    assert report.ok and report.length == 16 * 256
