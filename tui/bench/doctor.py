"""`streambench doctor`: is this installation whole, and what can it run here?

streambench ships five top-level packages with generic names (tui, loadgen, collectors,
analysis, compose). Another distribution installed in the same environment under one of those
names either replaces streambench's package (it comes first on the path) or is merged into the
same folder of site-packages, file over file. `find_shadows` names every such clash, one line
each; `quick_shadows` is the start-up variant every command runs: a few path look-ups (and, in
a wheel install, a look at streambench's own RECORD), with the slow metadata scan only once a
clash is suspected.

This module imports none of the five packages but `tui`, so it still works when one of the
others is the one shadowed."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

DISTRIBUTION = "streambench"
PACKAGES = ("tui", "loadgen", "collectors", "analysis", "compose")
ROOT = Path(__file__).resolve().parents[2]  # the folder holding the five packages
ISOLATED_INSTALL = "install streambench in an environment of its own (pipx install . or uv tool install .)"
REPORT_MODULES = ("pyspark", "py4j", "matplotlib")
REPORT_INSTALL = "pip install 'streambench[report]'"
TOOL_TIMEOUT_S = 20


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locations(name: str) -> list[Path]:
    """Where `import name` would load from: a package's folders, or a module's file."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations is not None:
        return [Path(p).resolve() for p in spec.submodule_search_locations]
    return [Path(spec.origin).resolve()] if spec.origin else []


def _misplaced(name: str, root: Path) -> list[Path]:
    """The locations of `name` other than streambench's own package folder."""
    return [loc for loc in _locations(name) if loc != root / name]


def _own_record(root: Path) -> dict[str, str] | None:
    """streambench's RECORD (path → sha256 entry) when it is installed from a wheel into root,
    None for a source checkout or an editable install (nothing else can be merged there)."""
    for record in root.glob(f"{DISTRIBUTION}-*.dist-info/RECORD"):
        entries: dict[str, str] = {}
        try:
            text = record.read_text(encoding="utf-8")
        except OSError:
            return None
        for line in text.splitlines():
            path, _, rest = line.partition(",")
            entries[path.strip('"')] = rest.partition(",")[0]
        return entries
    return None


def _sha256_entry(path: Path) -> str:
    import base64
    import hashlib

    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _merged(name: str, root: Path, record: dict[str, str] | None) -> bool:
    """In a wheel install: files in the package folder that streambench did not install, or an
    __init__.py that is not streambench's (another distribution wrote over it)."""
    if record is None:
        return False
    folder = root / name
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for filename in filenames:
            path = Path(dirpath) / filename
            rel = path.relative_to(root).as_posix()
            if rel not in record:
                return True
            if filename == "__init__.py" and record[rel] and _sha256_entry(path) != record[rel]:
                return True
    return False


def _other_owners(name: str, owners: Mapping[str, list[str]]) -> list[str]:
    """The distributions other than streambench that install the top-level name, with versions."""
    from importlib import metadata

    found = []
    for dist in sorted({d for d in owners.get(name, []) if _canonical(d) != DISTRIBUTION}):
        try:
            found.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            found.append(dist)
    return found


def _describe(name: str, root: Path, misplaced: list[Path], others: list[str]) -> str:
    ours = root / name
    found = ", ".join(map(str, misplaced))
    by = " and ".join(others)
    if others and misplaced:
        what = f"import {name} finds {found} (installed by {by}), not streambench's {ours}"
    elif others:
        what = f"{by} installs a package of that name into the same folder as streambench ({ours})"
    else:
        what = f"import {name} finds {found}, not streambench's {ours}"
    return f"'{name}' is shadowed: {what}; {ISOLATED_INSTALL}"


def find_shadows(root: Path = ROOT, suspects: tuple[str, ...] = PACKAGES) -> list[str]:
    """One line per package of streambench that another installed distribution, or another
    module on the path, shadows. The full check: it reads every distribution's metadata."""
    from importlib import metadata

    owners = metadata.packages_distributions()
    lines = []
    for name in suspects:
        misplaced = _misplaced(name, root)
        others = _other_owners(name, owners)
        if misplaced or others:
            lines.append(_describe(name, root, misplaced, others))
    return lines


def quick_shadows(root: Path = ROOT) -> list[str]:
    """find_shadows for every command's start-up: costs a few path look-ups when nothing is
    wrong, and reads the distributions' metadata only for a package that looks shadowed. Never
    fails: a check that cannot run finds nothing."""
    try:
        record = _own_record(root)
        suspects = tuple(name for name in PACKAGES
                         if _misplaced(name, root) or _merged(name, root, record))
        return find_shadows(root, suspects) if suspects else []
    except Exception:
        return []


def missing_report_modules() -> list[str]:
    """The report's libraries (PySpark, its py4j bridge, matplotlib) that cannot be imported."""
    missing = []
    for name in REPORT_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _run(argv: list[str]) -> str | None:
    """The output of a short command, None when it cannot run or fails."""
    import subprocess

    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout + out.stderr).strip() if out.returncode == 0 else None


def _java_line() -> str:
    import shutil

    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None or not os.access(java, os.X_OK):
        return ("java: not found; Kafka and Pulsar as local processes and the PySpark report need "
                "Java 17 (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or JAVA_HOME")
    m = re.search(r'version "(\d+)(?:\.(\d+))?', _run([java, "-version"]) or "")
    if m is None:
        return f"java: {java} does not tell its version"
    major = int(m.group(2) or 0) if m.group(1) == "1" else int(m.group(1))
    return f"java: {major} ({java})"


def _docker_line() -> str:
    address = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            version = client.version().get("Version", "version unknown")
        finally:
            client.close()
    except Exception:
        return (f"docker engine: none answers at {address}; targets run as local processes "
                "(start dockerd or set DOCKER_HOST for the docker runtime)")
    return f"docker engine: {version} at {address}"


def _compose_line() -> str:
    import shutil

    docker_cli = shutil.which("docker")
    if docker_cli is not None:
        out = _run([docker_cli, "compose", "version", "--short"])
        if out:
            return f"docker compose: {out.splitlines()[0]} (docker compose)"
    v1 = shutil.which("docker-compose")
    if v1 is not None:
        out = _run([v1, "version", "--short"])
        return f"docker compose: {(out or 'version unknown').splitlines()[0]} ({v1})"
    return ("docker compose: not found; the docker runtime needs it "
            "(Debian/Ubuntu: apt-get install docker-compose)")


def _report_line() -> str:
    from importlib import metadata

    missing = missing_report_modules()
    if missing:
        return f"reports: {', '.join(missing)} not installed; {REPORT_INSTALL}"
    versions = []
    for dist in ("pyspark", "matplotlib"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(dist)
    return f"reports: {', '.join(versions)}"


def _self_line() -> str:
    from importlib import metadata

    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = "not installed"
    return f"streambench: {version} ({ROOT}, Python {sys.version.split()[0]} at {sys.executable})"


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            client.version()
        finally:
            client.close()
    except Exception:
        return False
    return True


SAID_ABOVE = ("java",)  # a prerequisite CHECKS prints already
DEMO_PLATFORM = "redis"  # `make demo` (the README's first run): a local redis-server, then a report


def platform_lines(docker_ok: bool) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """One line per program a platform's runtimes need, then one per platform saying where it
    can run here; and each platform's runtimes that can."""
    from loadgen.platforms import PLATFORMS

    PLATFORMS.load_all()
    lines: list[str] = []
    found: dict[str, bool] = {}
    for p in PLATFORMS.values():
        for need in p.prerequisites:
            if need.name in found:
                continue
            path = need.find()
            found[need.name] = path is not None
            if need.name in SAID_ABOVE:
                continue
            users = ", ".join(f"{q.name} ({'/'.join(n.runtimes)})" for q in PLATFORMS.values()
                              for n in q.prerequisites if n.name == need.name)
            if path is None:
                lines.append(f"{need.name}: not found; {users} need it ({need.install})")
            else:
                lines.append(f"{need.name}: {need.version(path) or 'version unknown'} ({path})")
    runnable: dict[str, tuple[str, ...]] = {}
    for p in PLATFORMS.values():
        said = []
        ok = []
        for runtime in p.runtimes:
            missing = [n.name for n in p.prerequisites if runtime in n.runtimes
                       and not found[n.name]]
            if runtime == "docker" and not docker_ok:
                missing.append("a docker engine")
            if p.optional_client is not None and not p.optional_client.installed():
                missing.append(f"its client ({p.optional_client.install})")
            said.append(f"{runtime} " + (f"no (needs {', '.join(missing)})" if missing else "yes"))
            if not missing:
                ok.append(runtime)
        runnable[p.name] = tuple(ok)
        lines.append(f"platform {p.name}: {'; '.join(said)}")
    return lines, runnable


def _java_found() -> bool:
    return not _java_line().startswith("java: not found")


# one line each, in this order, after the shadows
CHECKS = (_java_line, _docker_line, _compose_line, _report_line)


def doctor(out: Callable[[str], object] = print) -> int:
    """Prints one line per shadowed package, one per tool, one per platform saying where it can
    run here; exits.INSTALL when a package is shadowed, exits.PLATFORM when the demo (a local
    Redis and its report, which needs Java) cannot run here, else 0."""
    from tui.bench import exits

    shadows = find_shadows()
    out(_self_line())
    for line in shadows:
        out(f"problem: {line}")
    for check in CHECKS:
        out(check())
    if shadows:
        return exits.INSTALL
    lines, runnable = platform_lines(_docker_answers())
    for line in lines:
        out(line)
    if "local" not in runnable.get(DEMO_PLATFORM, ()) or not _java_found():
        out(f"problem: `make demo` cannot run here: it needs {DEMO_PLATFORM} on the local runtime "
            "and Java for its report (see the lines above)")
        return exits.PLATFORM
    return exits.OK
