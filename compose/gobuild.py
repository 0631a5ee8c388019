"""Programs written in Go, built from the Go module proxy on first use: a broker version the
system's package does not have (e.g. a newer nats-server), a tool (Toxiproxy), and streambench's
own small Go programs kept in this folder (compose/promcheck).

`go install MODULE@VERSION` puts the program into `<cache>/bin/<name>-<version>/`, where the
cache is the one of compose.maven (`$STREAMBENCH_CACHE` or ~/.cache/streambench); a program of
this folder is built with `go build` into `<cache>/bin/<name>-<digest of its files>/`. Module
downloads go to `<cache>/go-modules/`. Later calls return the built program at once."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
from pathlib import Path

from compose.maven import CacheLock, cache_dir
from compose.process import start_process, stop_process
from loadgen.core.errors import StackError
from loadgen.core.stack import Progress

_MARKER = ".streambench-complete"
_PROGRESS_EVERY_S = 10.0
VERSION = re.compile(r"\d+\.\d+\.\d+")
# where Go's own archive installs it; not on every user's PATH
GO_PATHS = ("/usr/local/go/bin/go",)


def _program(where: Path, binary: str) -> Path | None:
    found = where / binary
    try:
        complete = (where / _MARKER).read_text().strip() == binary
    except OSError:
        return None
    return found if complete and os.access(found, os.X_OK) else None


async def go_program(name: str, module: str, version: str, binary: str, progress: Progress, *,
                     cache: Path | None = None) -> Path:
    """The program `binary` of Go module `module` at `version` (X.Y.Z), built once.

    Raises StackError with one line when Go is missing, the cache cannot be written or the
    build fails (the first error line, and where the full output is)."""
    if not VERSION.fullmatch(version):
        raise StackError(f"bad {name} version {version!r}: expected X.Y.Z")
    root = cache or cache_dir()
    where = root / "bin" / f"{name}-{version}"
    if (found := _program(where, binary)) is not None:
        return found
    return await _built(root, where, ["install", f"{module}@v{version}"], None, binary, progress,
                        f"{name} {version}")


async def source_program(name: str, source: Path, progress: Progress, *,
                         cache: Path | None = None) -> Path:
    """The program `name` built from the Go module in folder `source` (its main.go, go.mod and
    go.sum, which pins every module it needs), once per content of those files."""
    digest = hashlib.sha256()
    for part in ("main.go", "go.mod", "go.sum"):
        digest.update((source / part).read_bytes())
    root = cache or cache_dir()
    where = root / "bin" / f"{name}-{digest.hexdigest()[:12]}"
    if (found := _program(where, name)) is not None:
        return found
    return await _built(root, where, ["build", "-mod=readonly", "-o", str(where / name), "."],
                        source, name, progress, name)


async def _built(root: Path, where: Path, args: list[str], cwd: Path | None, binary: str,
                 progress: Progress, what: str) -> Path:
    """`go ARGS` run once (under a lock shared by every process that builds into `where`)."""
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StackError(f"cannot write the program cache {root}: {exc.strerror or exc}") from None
    lock = CacheLock(where.parent / f".{where.name}.lock")
    await lock.acquire(progress, what, kind="build")
    try:
        if (found := _program(where, binary)) is None:
            await _build(root, where, args, cwd, binary, progress, what)
            found = where / binary
    finally:
        lock.release()
    return found


async def _build(root: Path, where: Path, args: list[str], cwd: Path | None, binary: str,
                 progress: Progress, what: str) -> None:
    go = shutil.which("go") or next((p for p in GO_PATHS if os.access(p, os.X_OK)), None)
    if go is None:
        raise StackError(f"go not found: streambench builds {what} from the Go module proxy once "
                         "(Debian/Ubuntu: apt-get install golang-go)")
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    log = where.with_name(f"{where.name}.build.log")
    env = {**os.environ, "GOBIN": str(where), "GOMODCACHE": str(root / "go-modules"),
           "GOFLAGS": "-trimpath", "CGO_ENABLED": "0"}
    progress(f"building {what} with Go from the module proxy into {where} (first use only)")
    proc = start_process([go, *args], log, cwd=cwd, env=env)
    try:
        loop = asyncio.get_running_loop()
        started = last = loop.time()
        while proc.poll() is None:
            await asyncio.sleep(0.25)
            if loop.time() - last >= _PROGRESS_EVERY_S:
                last = loop.time()
                progress(f"building {what}: {loop.time() - started:.0f} s")
    except BaseException:
        stop_process(proc, grace_s=2)
        shutil.rmtree(where, ignore_errors=True)
        raise
    if proc.returncode != 0 or not (where / binary).is_file():
        shutil.rmtree(where, ignore_errors=True)
        raise StackError(f"Go could not build {what}: {_first_error(log)} (full output: {log})")
    (where / _MARKER).write_text(binary + "\n")
    log.unlink(missing_ok=True)


def _first_error(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines()
                 if ln.strip() and not ln.startswith(("go: downloading", "go: finding"))]
    except OSError:
        return "no output"
    return lines[0] if lines else "no output"

