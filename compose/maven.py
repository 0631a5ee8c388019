"""Jars from Maven Central for brokers that run on the JVM (Kafka, Pulsar): a generated pom,
`mvn dependency:copy-dependencies` into a cache directory on first use, the cached jars after.

The cache is `$STREAMBENCH_CACHE` or ~/.cache/streambench: `jars/<name>/` holds one assembled
classpath, `maven-repository/` is Maven's own download cache."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from compose.process import start_process, stop_process
from loadgen.core.errors import StackError
from loadgen.core.stack import Progress

CACHE_ENV = "STREAMBENCH_CACHE"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
_MARKER = ".streambench-complete"
_PROGRESS_EVERY_S = 2.0


def cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "streambench"


@dataclass(frozen=True)
class Coordinate:
    """`group:artifact:version[:type[:classifier]]`; a `pom` type brings in the dependencies it
    lists. A classified artifact (e.g. a release's `tar.gz:bin` archive) is taken alone: the
    dependencies in its pom belong to the main artifact."""

    group: str
    artifact: str
    version: str
    type: str = "jar"
    classifier: str = ""

    @classmethod
    def parse(cls, text: str) -> Coordinate:
        parts = text.split(":")
        if len(parts) not in (3, 4, 5) or not all(parts):
            raise ValueError(f"bad Maven coordinate {text!r}: expected "
                             "group:artifact:version[:type[:classifier]]")
        return cls(*parts)

    def __str__(self) -> str:
        text = f"{self.group}:{self.artifact}:{self.version}"
        if self.classifier:
            return f"{text}:{self.type}:{self.classifier}"
        return text + (f":{self.type}" if self.type != "jar" else "")

    @property
    def file_name(self) -> str:
        """The name copy-dependencies gives the artifact's file."""
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.{self.type}"

    def pom_xml(self) -> str:
        classified = ""
        if self.classifier:
            classified = (f"<classifier>{escape(self.classifier)}</classifier><exclusions><exclusion>"
                          "<groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>")
        return ("    <dependency>"
                f"<groupId>{escape(self.group)}</groupId>"
                f"<artifactId>{escape(self.artifact)}</artifactId>"
                f"<version>{escape(self.version)}</version>"
                f"<type>{escape(self.type)}</type>{classified}</dependency>\n")


def _pom(coordinates: Sequence[Coordinate]) -> str:
    deps = "".join(c.pom_xml() for c in coordinates)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
            "  <modelVersion>4.0.0</modelVersion>\n"
            "  <groupId>streambench</groupId><artifactId>classpath</artifactId>"
            "<version>1</version><packaging>pom</packaging>\n"
            f"  <dependencies>\n{deps}  </dependencies>\n"
            "</project>\n")


def _writable_cache(root: Path) -> Path:
    jars = root / "jars"
    try:
        jars.mkdir(parents=True, exist_ok=True)
        probe = jars / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if exc.errno == errno.ENOTDIR:
            reason = "a path component is a file, not a directory"
        raise StackError(f"cannot write the jar cache {root}: {reason}; set {CACHE_ENV} to a "
                         "writable directory") from None
    return jars


def _jars(lib: Path) -> list[Path]:
    return sorted(p for p in lib.glob("*.jar") if p.is_file())


def _complete(lib: Path, wanted: str) -> bool:
    try:
        return (lib / _MARKER).read_text() == wanted
    except OSError:
        return False


class CacheLock:
    """An exclusive flock on a file next to the classpath, so concurrent assemblies (two
    targets of one run, two streambench processes) wait for each other instead of racing."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None

    async def acquire(self, progress: Progress, what: str, kind: str = "jars") -> None:
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        told = False
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if not told:
                    progress(f"waiting for another streambench fetching the {what} {kind}")
                    told = True
                await asyncio.sleep(0.2)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None


async def assemble(name: str, coordinates: Sequence[str], progress: Progress, *,
                   what: str | None = None, cache: Path | None = None) -> list[Path]:
    """The jars of `coordinates` and all their runtime dependencies, in `<cache>/jars/<name>/`.

    The first call downloads them with Maven (one progress line every few seconds); later
    calls with the same coordinates return the cached jars at once. Raises StackError with one
    line when the cache cannot be written, Maven is missing or Maven fails."""
    what = what or name
    wanted = "\n".join(str(Coordinate.parse(c)) for c in coordinates) + "\n"
    root = cache or cache_dir()
    jars_root = _writable_cache(root)
    lib = jars_root / name
    if _complete(lib, wanted):
        return _jars(lib)
    lock = CacheLock(jars_root / f".{name}.lock")
    await lock.acquire(progress, what)
    try:
        if not _complete(lib, wanted):
            await _download(root, lib, [Coordinate.parse(c) for c in coordinates], progress, what)
            (lib / _MARKER).write_text(wanted)
    finally:
        lock.release()
    return _jars(lib)


def classpath(jars: Sequence[Path]) -> str:
    return os.pathsep.join(str(j) for j in jars)


async def _download(root: Path, lib: Path, coordinates: list[Coordinate], progress: Progress,
                    what: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError(f"mvn not found: Maven fetches the {what} jars from Maven Central once "
                         "(Debian/Ubuntu: apt-get install maven)")
    for stale in lib.parent.glob(f".{lib.name}.work-*"):  # left by a killed run; we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    work = lib.with_name(f".{lib.name}.work-{os.getpid()}")
    work.mkdir()
    log = lib.with_name(f"{lib.name}.maven.log")
    log.unlink(missing_ok=True)
    (work / "pom.xml").write_text(_pom(coordinates))
    argv = [mvn, "-B", "-f", str(work / "pom.xml"), f"-Dmaven.repo.local={root / 'maven-repository'}",
            f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={work / 'lib'}",
            "-DincludeScope=runtime"]
    progress(f"fetching the {what} jars from Maven Central into {lib} (first use only)")
    proc = start_process(argv, log, cwd=work)
    try:
        await _follow(proc, log, progress, what)
    except BaseException:
        stop_process(proc, grace_s=2)
        shutil.rmtree(work, ignore_errors=True)
        raise
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise StackError(f"Maven could not fetch the {what} jars: {_maven_error(log)} "
                         f"(full output: {log})")
    (work / "lib").mkdir(exist_ok=True)
    shutil.rmtree(lib, ignore_errors=True)
    (work / "lib").rename(lib)
    shutil.rmtree(work, ignore_errors=True)
    log.unlink(missing_ok=True)


async def _follow(proc: subprocess.Popen[bytes], log: Path, progress: Progress, what: str) -> None:
    loop = asyncio.get_running_loop()
    last_report = loop.time()
    reported = 0
    while proc.poll() is None:
        await asyncio.sleep(0.25)
        if loop.time() - last_report < _PROGRESS_EVERY_S:
            continue
        last_report = loop.time()
        with contextlib.suppress(OSError):
            done = log.read_text(errors="replace").count("Downloaded from")
            if done != reported:
                reported = done
                progress(f"{done} files of the {what} jars downloaded")


def _maven_error(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "no output"
    errors = [re.sub(r"^\[ERROR\]\s*|\s*-> \[Help \d+\]$", "", ln).strip()
              for ln in lines if ln.startswith("[ERROR]")]
    errors = [e for e in errors if e and not e.startswith(("->", "To see", "Re-run", "For more"))]
    if errors:
        return errors[0]
    return lines[-1].strip() if lines else "no output"
