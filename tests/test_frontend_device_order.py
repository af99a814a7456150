"""--device-order is read with a bound: a device, a directory or a file above 16 MiB is one line, exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from p2smt.cli.main import main
from p2smt.frontend.hlo import MAX_DEVICE_ORDER_BYTES, read_device_order

HLO = Path(__file__).parent / "data" / "hlo"
VERIFY = ["verify", "--system", "a100-4x16", "--level", "gpu=4", "--axes", "16", "--reduce", "0", "--matrix",
          "[[4,4]]", "--hlo", str(HLO / "allreduce.hlo"), "--device-order"]


def refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    return captured.err


@pytest.mark.skipif(not os.path.exists("/dev/urandom"), reason="no /dev/urandom")
def test_a_device_is_refused_before_it_is_read(capsys):
    assert "not a regular file" in refused([*VERIFY, "/dev/urandom"], capsys)


def test_a_directory_and_a_huge_file_are_refused(tmp_path, capsys):
    assert "not a regular file" in refused([*VERIFY, str(tmp_path)], capsys)
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:  # sparse: no 16 MiB written
        handle.truncate(MAX_DEVICE_ORDER_BYTES + 1)
    assert "more than 16 MiB" in refused([*VERIFY, str(huge)], capsys)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    assert "not a JSON device order" in refused([*VERIFY, str(deep)], capsys)


def test_a_device_order_at_the_bound_is_read(tmp_path):
    ok = tmp_path / "order.json"
    body = "[" + ",".join(str(i) for i in range(16)) + "]"
    ok.write_text(body + " " * (MAX_DEVICE_ORDER_BYTES - len(body)))
    assert read_device_order(ok) == tuple(range(16))
