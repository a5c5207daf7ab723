"""A py-spy profile of a running process, summarized (``shortpath.py``).

``Profile(py_spy, pid, out).start()`` runs ``py-spy record --format raw --function --gil`` on
the process (200 samples/s; only the thread holding the GIL is sampled, so the shares are of the
Python work the process did: here py-spy's own idle detection counted threads blocked in
``Condition.wait`` and ``epoll`` as busy; C code that runs with the GIL released, socket I/O
mostly, is not seen); ``stop()`` ends it with SIGINT, on which py-spy writes its folded
stacks. ``summary(raw)`` reads them: per function, its self samples
(the function on top of the stack) and its total samples (anywhere in the stack, once per
stack), the top N of each and of board_outbox's own functions by total, and the self samples
rolled up by package.

py-spy reads the target's memory with ``process_vm_readv`` and pauses it with ``ptrace``: it
needs the same user as the target (or root) and a kernel that allows ptrace of a non-child
(``kernel.yama.ptrace_scope`` 0 or absent, ``CAP_SYS_PTRACE`` in a container).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path
from typing import Any

RATE = 200  # samples per second


def find_py_spy(given: str | None) -> str | None:
    """``given``, else ``py-spy`` beside this interpreter (the venv's bin), else on PATH."""
    if given:
        return given
    for where in (Path(sysconfig.get_path("scripts")), Path(sys.executable).parent):
        if (where / "py-spy").exists():
            return str(where / "py-spy")
    return shutil.which("py-spy")


class Profile:
    def __init__(self, py_spy: str, pid: int, out: Path) -> None:
        self.py_spy, self.pid, self.out = py_spy, pid, out
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = out.with_suffix(".log")

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.py_spy, "record", "--pid", str(self.pid), "--rate", str(RATE), "--format", "raw",
             "--function", "--gil", "--full-filenames", "--output", str(self.out)],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"))  # noqa: SIM115

    def stop(self) -> str | None:
        """End the recording; None when the folded stacks were written, else why not."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.out.exists() and self.out.stat().st_size > 0:
            return None
        return f"py-spy wrote no profile: {self.log.read_text(errors='replace').strip()[-500:]}"


# where a frame's file lives -> the package its self time is charged to
PACKAGES = ("board_outbox_projections", "board_outbox", "pymongo", "bson", "opentelemetry",
            "aiohttp", "anyio", "asyncio", "prometheus_client", "msgspec", "hypercorn",
            "starlette", "google/protobuf", "requests", "urllib3", "logging", "json", "selectors",
            "ssl", "socket", "threading", "concurrent")


def package(frame: str) -> str:
    where = frame.rsplit("(", 1)[-1]
    for name in PACKAGES:
        if f"/{name}/" in where or f"/{name}.py" in where or \
                where.startswith((f"{name}/", f"{name}.py")):
            return name
    return "other"


def short(frame: str) -> str:
    """``func (/long/path/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py:12)``."""
    func, sep, where = frame.rpartition(" (")
    if not sep:
        return frame
    for cut in ("/site-packages/", "/src/", "/projections/", "/lib/python3.11/", "/benchmarks/"):
        if cut in where:
            where = where.rsplit(cut, 1)[1]
            break
    return f"{func} ({where}"


def summary(raw: Path, top: int = 25) -> dict[str, Any]:
    """Self and total samples per function (the top ``top`` by each) and self by package."""
    self_n: Counter[str] = Counter()
    total_n: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [short(f) for f in stack.split(";")]
        samples += n
        self_n[frames[-1]] += n
        for frame in set(frames):
            total_n[frame] += n
    by_package: Counter[str] = Counter()
    for frame, n in self_n.items():
        by_package[package(frame)] += n
    ours = Counter({f: n for f, n in total_n.items() if package(f).startswith("board_outbox")})

    def share(n: int) -> float:
        return round(100 * n / max(1, samples), 1)

    return {
        "samples": samples, "rate_per_s": RATE,
        "by_self": [{"function": f, "self_pct": share(n), "total_pct": share(total_n[f])}
                    for f, n in self_n.most_common(top)],
        "by_total": [{"function": f, "total_pct": share(n), "self_pct": share(self_n[f])}
                     for f, n in total_n.most_common(top)],
        "self_by_package": {k: share(n) for k, n in by_package.most_common()},
        "ours_by_total": [{"function": f, "total_pct": share(n), "self_pct": share(self_n[f])}
                          for f, n in ours.most_common(top)],
    }


def as_text(title: str, s: dict[str, Any]) -> str:
    lines = [title, f"{s['samples']} samples at {s['rate_per_s']}/s holding the GIL (py-spy --gil); "
             "shares of those samples", "", "self by package:"]
    lines += [f"  {pct:5.1f}%  {name}" for name, pct in s["self_by_package"].items()]
    for key, by in (("by_self", "self"), ("by_total", "total"),
                    ("ours_by_total", "total, board_outbox's own functions")):
        lines += ["", f"top {len(s[key])} by {by} (self% total%  function):"]
        lines += [f"  {r['self_pct']:5.1f} {r['total_pct']:5.1f}  {r['function']}" for r in s[key]]
    return "\n".join(lines) + "\n"
