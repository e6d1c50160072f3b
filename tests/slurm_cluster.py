"""A one-node Slurm cluster for the tests: munged, slurmctld and slurmd with a slurm.conf of their own.

Everything the daemons write (state, spool, logs, pid files) lives under one temporary directory, on two
free ports, so the cluster leaves nothing behind and does not meet a real one. It needs Debian's
`slurmctld`, `slurmd`, `munge` and `slurm-client` and root (`SlurmUser=root`); `why_unavailable` says what
is missing. Accounting (slurmdbd) is not run: `sacct` on PATH is a small script that answers from
`scontrol show job`, which is all submitit asks of it (each job's state).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "munge", "unmunge", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo")
# A SIGTERMed run finishes its optimizer step and writes its checkpoint before Slurm's SIGKILL.
KILL_WAIT_S = 120

# `sacct -o JobID,State,NodeList --parsable2 -j <id> ...`, the one call submitit makes, from scontrol.
_SACCT = """#!/usr/bin/env python3
import re, subprocess, sys
ids = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "-j"]
print("JobID|State|NodeList")
for job in ids:
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = dict(re.findall(r"(\\w+)=(\\S*)", line))
        task = f.get("ArrayTaskId")
        jid = f"{f['ArrayJobId']}_{task}" if task and "-" not in task and "," not in task else (
            f"{f['ArrayJobId']}_[{task}]" if task else f["JobId"])
        print(f"{jid}|{f.get('JobState', 'UNKNOWN')}|{f.get('NodeList', '')}")
"""


def why_unavailable() -> str | None:
    """Why no cluster can be started here (a missing binary, not root), or None."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return (
            f"Slurm/munge not installed ({', '.join(missing)} missing): "
            "apt-get install -y slurmctld slurmd munge slurm-client"
        )
    if os.geteuid() != 0:
        return "the one-node Slurm cluster runs its daemons as root (SlurmUser=root)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _munge_works() -> bool:
    cred = subprocess.run(["munge", "-n"], capture_output=True)
    if cred.returncode != 0:
        return False
    return subprocess.run(["unmunge"], input=cred.stdout, capture_output=True).returncode == 0


class SlurmCluster:
    """`start()`, then run Slurm commands with `env` (it carries SLURM_CONF and the `sacct` script); `stop()`."""

    def __init__(self, root: Path, cpus: int = 2, memory_mb: int = 4000):
        self.root, self.cpus, self.memory_mb = root, cpus, memory_mb
        self.node = socket.gethostname()
        self.conf = root / "slurm.conf"
        self._daemons: list[Path] = []  # pid files of what this cluster started
        self._munged: subprocess.Popen | None = None
        bin_dir = root / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        (bin_dir / "sacct").write_text(_SACCT)
        (bin_dir / "sacct").chmod(0o755)
        self.env = dict(os.environ, SLURM_CONF=str(self.conf), PATH=f"{bin_dir}:{os.environ['PATH']}")

    def _write_conf(self) -> None:
        r = self.root
        for sub in ("state", "spool", "log"):
            (r / sub).mkdir(exist_ok=True)
        keys = {
            "ClusterName": "twinkle-test",
            "SlurmctldHost": self.node,
            "AuthType": "auth/munge",
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "SlurmctldPidFile": r / "slurmctld.pid",
            "SlurmdPidFile": r / "slurmd.pid",
            "SlurmdSpoolDir": r / "spool",
            "StateSaveLocation": r / "state",
            "SlurmctldLogFile": r / "log" / "slurmctld.log",
            "SlurmdLogFile": r / "log" / "slurmd.log",
            "SlurmctldPort": _free_port(),
            "SlurmdPort": _free_port(),
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "ReturnToService": 2,
            "SchedulerType": "sched/backfill",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_Core",
            "JobCompType": "jobcomp/none",
            "AccountingStorageType": "accounting_storage/none",
            "MpiDefault": "none",
            "KillWait": KILL_WAIT_S,
            "MinJobAge": 3600,  # scontrol (and so the `sacct` script) remembers ended jobs this long
            "SchedulerParameters": "sched_interval=1",
        }
        lines = [f"{k}={v}" for k, v in keys.items()]
        lines.append(f"NodeName={self.node} CPUs={self.cpus} RealMemory={self.memory_mb} State=UNKNOWN")
        lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 60) -> None:
        self._write_conf()
        if not _munge_works():
            run_dir = Path("/run/munge")
            run_dir.mkdir(parents=True, exist_ok=True)
            shutil.chown(run_dir, "munge", "munge")
            # munged as its own user, in the foreground, so that stop() ends exactly this one.
            self._munged = subprocess.Popen(
                ["su", "-s", "/bin/sh", "munge", "-c", "exec /usr/sbin/munged -F"]
            )
            self._wait(_munge_works, timeout, "munged did not answer")
        for daemon, args in (("slurmctld", ["-c", "-i"]), ("slurmd", ["-c"])):
            subprocess.run([daemon, *args], env=self.env, check=True, capture_output=True)
            self._daemons.append(self.root / f"{daemon}.pid")
        self._wait(self._node_idle, timeout, f"the node did not come up (logs in {self.root / 'log'})")

    def _node_idle(self) -> bool:
        out = self.scontrol("show", "node", self.node, check=False)
        return "State=IDLE" in out

    @staticmethod
    def _wait(ready, timeout: float, message: str) -> None:
        deadline = time.time() + timeout
        while not ready():
            if time.time() > deadline:
                raise RuntimeError(message)
            time.sleep(0.5)

    def scontrol(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(["scontrol", *args], env=self.env, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise RuntimeError(f"scontrol {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def jobs(self) -> list[dict[str, str]]:
        """Every job the controller remembers, one dict of `scontrol -o show job`'s fields each."""
        out = self.scontrol("-o", "show", "job", check=False)
        return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.splitlines() if "JobId=" in line]

    def stop(self) -> None:
        for pid_file in reversed(self._daemons):
            try:
                pid = int(pid_file.read_text())
            except (OSError, ValueError):
                continue
            _end(pid)
        self._daemons.clear()
        if self._munged is not None:
            self._munged.terminate()
            self._munged.wait(timeout=30)


def _end(pid: int, timeout: float = 30) -> None:
    """SIGTERM `pid`, then SIGKILL it if it is still there after `timeout`."""
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, 9)
