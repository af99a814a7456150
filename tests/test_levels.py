"""Re-instantiating systems: --nodes on the scalable level and --level NAME=SIZE on any level."""

from __future__ import annotations

import pytest

from p2smt.cli.main import main
from p2smt.errors import P2Error
from p2smt.model.system import load_system


def test_levels_resize_any_level_and_compose_with_nodes():
    pod = load_system("h100-superpod", nodes=4, levels={"su": 2})
    assert pod.sizes == (2, 4, 4, 2) and pod.num_devices == 64
    assert load_system("h100-superpod").num_devices == 1024


@pytest.mark.parametrize("levels, match", [({"rack": 2}, "unknown level"), ({"su": 0}, "at least 1")])
def test_bad_levels_are_p2errors(levels, match):
    with pytest.raises(P2Error, match=match):
        load_system("h100-superpod", levels=levels)


def test_cli_level_option(capsys):
    assert main(["placements", "--system", "h100-superpod", "--level", "su=1", "--nodes", "2",
                 "--axes", "16", "--json"]) == 0
    assert '"su",\n      1' in capsys.readouterr().out.replace(" ", " ")
    assert main(["placements", "--system", "h100-superpod", "--level", "su", "--axes", "4"]) == 2
    assert "NAME=SIZE" in capsys.readouterr().err
