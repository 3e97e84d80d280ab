"""common.launch: launch problems refused before any rank starts, the root cause of a failed job
named once in one line with its rank and exit code, and a frozen rank ending the job about
--timeout-s after it stalled (two real torchrun jobs; the rest from torchrun's failure records)."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from common import launch
from common.failures import PEER_LOST, PREEMPTED

RANKS = Path(__file__).parent / "fixtures" / "ranks.py"
LABS = Path(__file__).resolve().parents[2]


def _failure(exitcode: int, kind: str | None = None, message: str = "", code: int | None = None, t: int = 0,
             recorded: bool = False, pid: int = 0):
    """What torchrun's ProcessFailure holds: the error file's JSON (ours, @record's, or none)."""
    if kind:
        data = {"message": {"message": message, "extraInfo": {"timestamp": "0"}},
                "dt": {"kind": kind, "code": code if code is not None else exitcode, "time_ns": t}}
    elif recorded:
        data = {"message": {"message": message, "extraInfo": {"py_callstack": "Traceback...", "timestamp": "0"}}}
    else:
        data = {"message": "<NONE>"}
    return SimpleNamespace(exitcode=exitcode, error_file="<N/A>" if not (kind or recorded) else "/x/error.json",
                           error_file_data=data, pid=pid, timestamp=0)


@pytest.mark.parametrize("failures, line, code", [
    ({0: _failure(4, "peer", "lost a peer rank", t=2), 1: _failure(2, "cause", "--tp 3 must divide 4", t=1)},
     "rank 1 of 4: --tp 3 must divide 4", 2),
    ({1: _failure(1, recorded=True, message="ValueError: a bug")}, "rank 1 of 4 raised ValueError: a bug", 1),
    ({0: _failure(4, "peer", "lost a peer rank"), 3: _failure(-9)}, "rank 3 of 4 died (SIGKILL)", 137),
    ({0: _failure(-15, pid=100), 1: _failure(-9, pid=101)}, "rank 1 of 4 died (SIGKILL)", 137),
    ({0: _failure(-15, pid=100), 1: _failure(4, "peer", "lost a peer rank", pid=101)}, "rank 1 of 4: lost a peer",
     PEER_LOST),
    ({0: _failure(4, "timeout", "a collective timed out"), 2: _failure(-9)}, "rank 2 of 4 stopped answering",
     PEER_LOST),
    ({0: _failure(130, "interrupt", "interrupted")}, "interrupted (Ctrl-C)", 130),
    ({2: _failure(4, "peer", "lost a peer rank (it died)")}, "rank 2 of 4: lost a peer rank (it died)", PEER_LOST),
    ({1: _failure(7)}, "rank 1 of 4 exited with code 7", 7),
], ids=["cause-first", "bug", "kill-9", "kill-9-victim-read-first", "stopped-peer-read-first", "frozen", "ctrl-c",
        "lost-peer", "plain-exit"])
def test_the_root_cause_is_one_line(failures, line, code, monkeypatch):
    # pid 100: a rank the agent was still running when the first failure came, and stopped (SIGTERM)
    monkeypatch.setattr(launch, "STOPPED_BY_AGENT", {100}, raising=False)
    got, got_code = launch.explain(failures, 4)
    assert line in got and "\n" not in got and got_code == code


def test_a_preempted_job_reports_the_ranks_word(tmp_path):
    err = tmp_path / "a" / "0" / "error.json"
    err.parent.mkdir(parents=True)
    err.write_text('{"message": {"message": "SIGTERM: checkpoint written", "extraInfo": {"timestamp": "0"}},'
                   ' "dt": {"code": 75, "kind": "preempted"}}')
    assert launch._after_signal(str(tmp_path), signal.SIGTERM) == ("SIGTERM: checkpoint written", PREEMPTED)
    assert launch._after_signal(str(tmp_path / "none"), signal.SIGINT)[1] == 130


@pytest.mark.parametrize("argv, needle", [
    (["--nproc-per-node", "0", str(RANKS), "ok"], "NPROC (--nproc-per-node) must be a positive integer"),
    (["--nproc-per-node", "abc", str(RANKS), "ok"], "got 'abc'"),
    (["--nproc-per-node", "-2", str(RANKS), "ok"], "got -2"),
    (["--nnodes", "0", "--nproc-per-node", "2", str(RANKS), "ok"], "NNODES (--nnodes) must be a positive integer"),
    (["--nnodes", "2", "--node-rank", "5", "--nproc-per-node", "2", str(RANKS), "ok"], "NODE_RANK (--node-rank)"),
    (["--nproc-per-node", "2", "nowhere.py"], "no such script nowhere.py"),
    (["--nnodes", "2", "--node-rank", "0", "--master-port", "70000", "--nproc-per-node", "1", str(RANKS), "ok"],
     "MASTER_PORT (--master-port) must be a TCP port, 1..65535, got 70000"),
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node0:0", "--nproc-per-node", "1", str(RANKS)],
     "the port of MASTER_ADDR:MASTER_PORT (--rdzv-endpoint) must be a TCP port, 1..65535, got '0'"),
    (["--bogus"], "launch: error:"),
])
def test_launch_problems_are_one_line_before_any_rank(argv, needle, capsys):
    with pytest.raises(SystemExit) if argv == ["--bogus"] else _nothing() as e:
        code = launch.main(argv)
    code = e.value.code if argv == ["--bogus"] else code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and needle in err


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_a_port_another_program_holds_is_refused(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert launch.main(["check-port", "127.0.0.1", str(port)]) == 2
        args = ["--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                "--master-port", str(port), str(RANKS), "ok"]
        assert launch.main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(f"port {port} on 127.0.0.1 is already in use" in e for e in err)


def _launch(*args: str, timeout: float = 180, **env_extra: str) -> subprocess.CompletedProcess:
    # DT_LAUNCH_PHASE=ranks: the fixture has no arguments to check; one torch start-up less on 2 cores
    env = {**os.environ, "PYTHONPATH": str(LABS), "OMP_NUM_THREADS": "1", "DT_LAUNCH_PHASE": "ranks", **env_extra}
    return subprocess.run([sys.executable, "-m", "common.launch", "--standalone", "--nnodes", "1",
                           "--nproc-per-node", "2", str(RANKS), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.mark.parametrize("mode", ["die", "die-busy"])
def test_a_rank_killed_by_signal_9_is_one_line_once(mode):
    """Rank 1 is killed by SIGKILL. Rank 0 either finds its peer gone and exits (code 4), or torchrun's agent sees
    rank 1 dead first and stops rank 0 with SIGTERM (always so in die-busy, where rank 0 is not in a collective).
    torchrun then records both, rank 0's SIGTERM first: the cause is the failure before the agent stopped anyone."""
    proc = _launch(mode)
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 137 and err == ["error: rank 1 of 2 died (SIGKILL); the other ranks lost it and were "
                                              "stopped"], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_frozen_rank_ends_the_job_at_its_timeout(tmp_path):
    mark = tmp_path / "froze_at"
    proc = _launch("freeze", "2", DT_TEST_MARK=str(mark))  # rank 1 stops (SIGSTOP); rank 0 waits 2 s for it
    ended = time.time()
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == PEER_LOST and len(err) == 1, proc.stderr
    assert err[0].startswith("error: rank 1 of 2 stopped answering"), proc.stderr
    # --timeout-s 2 + the launcher's 3 s grace + slack for a shared machine; torchrun alone waits 30 s more
    assert ended - float(mark.read_text()) < 2 + 3 + 8


@pytest.mark.parametrize("phase, checked, started", [("all", True, True), ("check", True, False),
                                                      ("ranks", False, True)])
def test_a_job_of_several_nodes_checks_once(phase, checked, started, tmp_path, monkeypatch, capfd):
    """slurm/lab.sbatch: DT_LAUNCH_PHASE=check once before srun (no rank starts), then =ranks on every node
    (no second check: N nodes checking the same shared run folder at once would race)."""
    from torch.distributed import run as torchrun
    script = tmp_path / "job.py"
    script.write_text("import os; print('check pass' if os.environ.get('DT_CHECK_ARGS') == '1' else 'a rank')\n")
    ran = []
    monkeypatch.setattr(torchrun, "run", lambda args: ran.append(args.nnodes))
    # what starting the ranks would change in this process: left as it was
    monkeypatch.setattr(launch, "_cap_failure_teardown", lambda grace_s: None)
    monkeypatch.setattr(launch.logging, "disable", lambda level: None)
    for var in ("DT_LAUNCHER", "TORCH_CPP_LOG_LEVEL"):
        monkeypatch.setenv(var, os.environ.get(var, ""))
    monkeypatch.setenv("DT_LAUNCH_PHASE", phase)
    args = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1",
            str(script)]
    assert launch.main(args) == 0
    assert ("check pass" in capfd.readouterr().out) == checked and bool(ran) == started
    monkeypatch.setenv("DT_LAUNCH_PHASE", "later")
    assert launch.main(args) == 2 and "DT_LAUNCH_PHASE must be one of all, check, ranks" in capfd.readouterr().err


def test_a_multi_node_launch_says_what_it_waits_for_and_gives_up_in_time():
    """NNODES=2 and no second node: where and for how many it waits, how many joined, then one line (exit 4) after
    DT_RDZV_TIMEOUT_S, not torchrun's 600 s in silence."""
    from testkit import free_port

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(LABS), "OMP_NUM_THREADS": "1", "DT_LAUNCH_PHASE": "ranks",
           "DT_RDZV_TIMEOUT_S": "4", "DT_RDZV_REPORT_S": "1"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "common.launch", "--nnodes", "2", "--nproc-per-node", "1",
                           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", str(RANKS), "ok"],
                          capture_output=True, text=True, env=env, timeout=120)
    took = time.monotonic() - start
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == PEER_LOST and "Traceback" not in proc.stderr, proc.stderr
    assert err[0].startswith(f"launch: waiting up to 4 s for 2 nodes at 127.0.0.1:{port} (c10d rendezvous"), err
    assert any(f"still waiting at 127.0.0.1:{port}: 1 of 2 nodes joined" in line for line in err[1:-1]), err
    assert err[-1].startswith(f"error: the rendezvous at 127.0.0.1:{port} did not gather 2 nodes within 4 s "
                              "(1 of 2 nodes joined); start the same command on every node"), err
    assert took < 4 + 60  # the limit, plus a torch start-up on a shared machine; torchrun alone waits 600 s
