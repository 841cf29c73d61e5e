"""Ranks forked from per-rank fork servers: as a fresh interpreter per rank would be, and
nothing left behind however the World ends."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

import chaoslight
from chaoslight import InvalidArgument, World
from chaoslight._world._forkserver import supported

ROOT = Path(__file__).resolve().parents[1]
IDENTITY = f"{ROOT}/tests/world_targets.py:process_identity"
pytestmark = pytest.mark.skipif(not supported(), reason="fork servers need Linux pidfd_open")


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (zombies count as gone: their parent reaps them)."""
    found = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(pid)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.mark.slow
def test_ranks_draw_their_own_seeds_and_a_replaced_rank_comes_from_its_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each rank has its own string-hash seed (as under torchrun); a rank that replaces a dead
    one is forked by that rank's server and draws a new numpy seed."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    with World(size=2) as world:
        servers = [server.proc.pid for server in world._servers]
        before = world.run(IDENTITY, timeout=60)
        assert before.status == "passed", before.report()
        ranks = [before.ranks[r].value for r in (0, 1)]
        assert ranks[0]["hash"] != ranks[1]["hash"]
        assert [r["parent"] for r in ranks] == servers
        crashed = world.run(
            f"{ROOT}/tests/world_targets.py:passing",
            chaoslight.Schedule([chaoslight.Crash(site="lightning.training_step", rank=1, step=1)]),
            timeout=60,
        )
        assert crashed.status == "crashed", crashed.report()
        after = world.run(IDENTITY, timeout=60)
        assert after.status == "passed", after.report()
        new = after.ranks[1].value
        assert new["pid"] != ranks[1]["pid"] and new["parent"] == servers[1]
        assert new["hash"] == ranks[1]["hash"]  # the rank's seed, as a rank that survives keeps
        assert new["numpy"] != ranks[1]["numpy"]
        assert after.ranks[0].value["pid"] == ranks[0]["pid"]
        assert after.ranks[0].value["runs"] == 2  # the surviving rank kept its module state


@pytest.mark.slow
def test_renew_gives_every_rank_a_new_process_from_its_server_and_nothing_carries_over(
    world2: World,
) -> None:
    """World.renew(): new workers forked by the same servers, a new group, no module state
    from earlier examples, the old workers gone."""
    servers = [server.proc.pid for server in world2._servers]
    first, second = (world2.run(IDENTITY, timeout=60) for _ in range(2))
    assert second.status == "passed", second.report()
    runs = [second.ranks[r].value["runs"] for r in (0, 1)]
    assert runs == [first.ranks[r].value["runs"] + 1 for r in (0, 1)]
    old = world2.pids
    assert world2.renew() is world2
    after = world2.run(IDENTITY, timeout=60)
    assert after.status == "passed", after.report()
    values = [after.ranks[r].value for r in (0, 1)]
    assert [v["runs"] for v in values] == [1, 1]
    assert [v["parent"] for v in values] == servers
    assert set(world2.pids).isdisjoint(old) and alive(old) == []
    assert [server.proc.pid for server in world2._servers] == servers


def test_closing_a_world_whose_servers_still_import_leaves_nothing() -> None:
    """A World closed at once (its servers still importing torch) kills them; no process or
    folder survives, and the closed World refuses to renew its ranks."""
    world = World(size=2)
    servers = [server.proc.pid for server in world._servers]
    assert len(servers) == 2 and all(server.waiting for server in world._servers)
    root = world._root
    world.close()
    with pytest.raises(chaoslight.ChaosError, match="closed"):
        world.renew()
    deadline = time.monotonic() + 10
    while alive(servers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive(servers) == [] and not root.exists()


@pytest.mark.slow
def test_a_killed_server_is_a_one_line_startup_error_and_close_still_cleans_up() -> None:
    """A rank's server that dies (OOM killer) before forking: WorkersDidNotStart naming it,
    and close afterwards leaves no process."""
    world = World(size=2)
    try:
        os.kill(world._servers[1].proc.pid, signal.SIGKILL)
        with pytest.raises(chaoslight.ChaosError, match=r"^World fork server for rank 1 exited"):
            world.start(timeout=60)
    finally:
        pids = [server.proc.pid for server in world._servers]
        world.close()
    assert alive(pids) == []


@pytest.mark.slow
def test_fork_false_starts_fresh_interpreters_with_a_spare() -> None:
    """World(fork=False): no server, every worker a child of this process, a spare kept."""
    with World(size=2, fork=False) as world:
        world.start(timeout=120)
        assert world._servers == []
        parents = {psutil.Process(pid).ppid() for pid in world.processes}
        assert parents == {os.getpid()} and len(world.processes) == 3


def test_fork_must_be_a_bool() -> None:
    """World(fork="yes") is refused naming the argument, before any process starts."""
    with pytest.raises(InvalidArgument, match="fork"):
        World(size=2, fork="yes")  # type: ignore[arg-type]
