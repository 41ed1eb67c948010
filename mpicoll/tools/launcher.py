"""The launcher: one ``mpiexec`` per configuration, under a time budget, results merged.

An MPI library reads its algorithm settings (MPICH's ``MPIR_CVAR_*``, Open MPI's ``--mca``)
once, at ``MPI_Init``: each configuration therefore needs its own launch.  This module starts
them from a plain process (no MPI job of its own), each as

    mpiexec [FLAGS] -n P python -m mpicoll bench ARGS --json PART.json

with the configuration's environment variables and ``mpiexec`` flags, under a timeout, and
merges the JSON parts into one bench document.  ``bench --native-algorithms`` and
``mpicoll sweep`` use it.

Which settings force which library's algorithm (:func:`native_configs`):

* MPICH: ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM=<name>`` plus ``MPIR_CVAR_DEVICE_COLLECTIVES=none``
  (``MPIR_<Coll>`` then calls ``MPIR_<Coll>_impl``, which reads the CVAR, instead of CH4's
  device path, whose shared-memory algorithms would not) and
  ``MPIR_CVAR_COLLECTIVE_FALLBACK=print``: where the forced algorithm cannot run on a call,
  MPICH says so on stderr ("Allreduce reduce_scatter_allgather cannot be applied.") and runs
  its own choice instead.  bench captures that line per call (:func:`fallback_message`).
* Open MPI: ``--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_<coll>_algorithm <ID>``
  (the IDs of :data:`mpicoll.algorithms.twins.OMPI`) plus ``--mca coll ^han,adapt,...``
  (:data:`OMPI_EXCLUDE`) and ``--mca coll_base_verbose 9``.  Which coll component serves a
  communicator is decided per communicator by priority: self 75 (MPI_COMM_SELF only), han 35,
  tuned 30, basic and libnbc 10, adapt and sm 0 (``ompi_info --param coll all --level 9``,
  Open MPI 5.0.11 wheel).  han disqualifies itself on one node ("comm has only local
  processes", ``coll_han_module.c``), but on several nodes it would run its own hierarchical
  algorithm over tuned's: excluding it (and adapt, sm, and the xhc/acoll/hcoll/ucc of other
  builds; an absent name in an exclusion list is accepted) leaves tuned the provider of every
  blocking collective.  ``coll_base_verbose 9`` makes every rank print "coll:base:comm_select:
  selecting tuned, priority 30, Enabled" per communicator: :func:`ompi_selection` reads it
  back as the launch's evidence.  Open MPI does not say per call which algorithm ran (its
  tuned/base notices are ``OPAL_OUTPUT``, compiled out of release builds): bench says what
  ran from :func:`mpicoll.algorithms.twins.ompi_ran` (coll/base's silent fallbacks), and
  the test proves the forcing by traffic (``--mca pml_monitoring_enable 2``: per-peer message
  counts of the collective's internal point-to-point traffic).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Config",
    "Launch",
    "add_launch_options",
    "config_dict",
    "config_of",
    "fallback_message",
    "library",
    "merge",
    "mpiexec",
    "native_configs",
    "native_names",
    "ompi_id",
    "ompi_selection",
    "resume_problem",
    "resumed",
    "run",
    "save_json",
]

#: Variables a launcher or an initialised MPI leaves in a process's environment, which would
#: make a child believe it belongs to this process's (singleton) job.
_JOB_VARS = ("PMI_", "PMIX_", "HYDRA_", "MPI_LOCAL", "OMPI_COMM_WORLD", "OMPI_MCA_ess",
             "OMPI_MCA_orte", "OMPI_MCA_pmix", "OMPI_UNIVERSE", "OMPI_FIRST", "OMPI_NUM",
             "OMPI_APP", "OMPI_FILE", "PRTE_", "OMPI_MCA_prte")

#: Open MPI coll components excluded in a forced launch, so that tuned serves every blocking
#: collective (absent names are accepted by the exclusion list).
OMPI_EXCLUDE = "^han,adapt,sm,xhc,acoll,hcoll,ucc"


@dataclass
class Config:
    """One launch: a name, environment variables and ``mpiexec`` flags.

    ``native`` is the library algorithm it forces (None: the library's default), and
    ``collectives`` the collectives it is forced for (the launch benches only those)."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    native: str | None = None
    collectives: list[str] = field(default_factory=list)
    #: the I-form's algorithm is forced (``MPIR_CVAR_I<COLL>_INTRA_ALGORITHM``, libnbc)
    nonblocking: bool = False

    def setting(self) -> str:
        """The settings as a user would type them: ``VAR=value ... --mca k v``."""
        return " ".join([*(f"{k}={v}" for k, v in self.env.items()), *self.flags]) or "-"


@dataclass
class Launch:
    """What one configuration's launch gave: exit status, seconds, its JSON document (None if
    it wrote none) and the tail of its output."""

    config: Config
    status: int
    seconds: float
    doc: dict[str, Any] | None
    output: str
    evidence: str | None = None
    #: files the launch left beside its JSON part (``PART.rank<r>.current`` and ``.stderr``:
    #: what verify's ranks were doing when the library killed them), by suffix
    leftovers: dict[str, str] = field(default_factory=dict)


def library() -> tuple[str, str]:
    """``(kind, version line)`` of the MPI library mpi4py is built on: kind ``"mpich"``,
    ``"openmpi"`` or ``"other"`` (``MPI_Get_library_version``, callable before ``MPI_Init``)."""
    from mpi4py import MPI

    text = MPI.Get_library_version().replace("\x00", "")  # Open MPI's ends in a NUL
    first = text.strip().splitlines()[0] if text.strip() else "unknown"
    low = text.lower()
    if "open mpi" in low:
        return "openmpi", first.strip()
    if "mpich" in low:
        return "mpich", first.strip()
    return "other", first.strip()


def native_names(kind: str, collective: str, nonblocking: bool = False) -> list[str]:
    """The library's forceable algorithms of ``collective`` (its I-form's with
    ``nonblocking``; empty for an unknown library)."""
    from ..algorithms.twins import MPICH, MPICH_NB, OMPI, OMPI_NB

    if kind == "mpich":
        return list((MPICH_NB if nonblocking else MPICH).get(collective, ()))
    if kind == "openmpi":
        return list((OMPI_NB if nonblocking else OMPI).get(collective, {}).values())
    return []


def ompi_id(collective: str, name: str, nonblocking: bool = False) -> int:
    """Open MPI's ID of algorithm ``name`` (tuned's, or libnbc's for the I-form)."""
    from ..algorithms.twins import OMPI, OMPI_NB

    table = (OMPI_NB if nonblocking else OMPI)[collective]
    return next(i for i, v in table.items() if v == name)


def native_configs(kind: str, collectives: Sequence[str], names: Sequence[str],
                   p: int | None = None, nonblocking: bool = False) -> list[Config]:
    """One configuration per native algorithm name, forcing it for every collective in
    ``collectives`` that has it (``names``: the names to force; ``["all"]`` every one).
    With ``p``, an Open MPI algorithm that fails at every call at P = ``p`` (``two_proc``
    at P != 2: :data:`mpicoll.algorithms.twins.OMPI_FALLBACKS`) is left out.  With
    ``nonblocking``: the I-forms' algorithms (MPICH ``MPIR_CVAR_I<COLL>_INTRA_ALGORITHM``,
    Open MPI ``coll_libnbc_i<coll>_algorithm``)."""
    from ..algorithms.twins import MPICH_SETTINGS, OMPI_FALLBACKS

    order: list[str] = []
    colls: dict[str, list[str]] = {}
    for c in collectives:
        for n in native_names(kind, c, nonblocking):
            if names != ["all"] and n not in names:
                continue
            rule = OMPI_FALLBACKS.get((c, n)) if kind == "openmpi" and not nonblocking else None
            if p is not None and rule is not None and rule[1] is None and rule[0](p, 1, True):
                continue
            if n not in colls:
                order.append(n)
            colls.setdefault(n, []).append(c)
    out = []
    for n in order:
        cfg = Config(f"native:{n}", native=n, collectives=colls[n], nonblocking=nonblocking)
        if kind == "mpich":
            cfg.env = {"MPIR_CVAR_DEVICE_COLLECTIVES": "none",
                       "MPIR_CVAR_COLLECTIVE_FALLBACK": "print"}
            i = "I" if nonblocking else ""
            for c in colls[n]:
                cfg.env[f"MPIR_CVAR_{i}{c.upper()}_INTRA_ALGORITHM"] = n
                if not nonblocking:
                    cfg.env.update(MPICH_SETTINGS.get((c, n), {}))
        elif nonblocking:
            cfg.flags = ["--mca", "coll", OMPI_EXCLUDE, "--mca", "coll_base_verbose", "9"]
            for c in colls[n]:
                cfg.flags += ["--mca", f"coll_libnbc_i{c}_algorithm", str(ompi_id(c, n, True))]
        else:
            cfg.flags = ["--mca", "coll", OMPI_EXCLUDE, "--mca", "coll_base_verbose", "9",
                         "--mca", "coll_tuned_use_dynamic_rules", "1"]
            for c in colls[n]:
                cfg.flags += ["--mca", f"coll_tuned_{c}_algorithm", str(ompi_id(c, n))]
        out.append(cfg)
    return out


_SELECTING = re.compile(r"coll:base:comm_select: selecting\s+(\w+), priority\s+(-?\d+), "
                        r"(Enabled|Disabled)")


def ompi_selection(text: str) -> str | None:
    """From the ``coll_base_verbose 9`` output ``text`` of an Open MPI launch: a line saying
    which coll components were enabled on its communicators (tuned must be, han must not);
    None if the output has no selection lines."""
    enabled: dict[str, int] = {}
    for m in _SELECTING.finditer(text):
        if m.group(3) == "Enabled":
            enabled[m.group(1)] = int(m.group(2))
    if not enabled:
        return None
    top = sorted(enabled.items(), key=lambda kv: -kv[1])
    names = ", ".join(f"{n} {pr}" for n, pr in top)
    verdict = "tuned serves the forced collective" if "tuned" in enabled and not any(
        n in enabled and enabled[n] > enabled["tuned"] for n in ("han", "adapt", "sm", "xhc",
                                                                 "acoll", "hcoll", "ucc")) \
        else "tuned is NOT the provider"
    return f"coll_base_verbose: enabled {names}: {verdict}"


_FALLBACK = re.compile(r"^\s*(\w+) (\w+) cannot be applied", re.MULTILINE)


def fallback_message(text: str, collective: str, nonblocking: bool = False) -> str | None:
    """MPICH's line saying a forced algorithm of ``collective`` (its I-form with
    ``nonblocking``: "Iallreduce ...") could not run (with
    ``MPIR_CVAR_COLLECTIVE_FALLBACK=print``), found in captured stderr ``text``; None if none."""
    i = "i" if nonblocking else ""
    for m in _FALLBACK.finditer(text):
        if m.group(1).lower() in (i + collective.replace("_", "").lower(),
                                  i + collective.lower()):
            return m.group(0).strip()
    return None


def mpiexec() -> list[str]:
    """``[mpiexec, flags...]``: ``$MPIEXEC``, else the ``mpiexec`` beside this interpreter, else
    the first on ``PATH`` (``--oversubscribe`` added for Open MPI).

    Raises:
        FileNotFoundError: there is none.
    """
    if os.environ.get("MPIEXEC"):
        return shlex.split(os.environ["MPIEXEC"])
    here = Path(sys.executable).parent / "mpiexec"
    exe = str(here) if here.exists() else shutil.which("mpiexec")
    if exe is None:
        raise FileNotFoundError("no mpiexec found (set $MPIEXEC)")
    if library()[0] == "openmpi":
        return [exe, "--oversubscribe"]
    return [exe]


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_JOB_VARS)}
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # Open MPI refuses root without these
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.update(extra)
    return env


def run(configs: Sequence[Config], p: int, bench_args: Sequence[str], *,
        timeout: float = 600.0, budget: float = 0.0,
        progress: Any = None, command: str = "bench",
        extra: Callable[[Config], list[str]] | None = None,
        launch: Sequence[str] | None = None) -> list[Launch]:
    """Launch ``mpicoll COMMAND BENCH_ARGS --json PART`` on ``p`` ranks once per configuration.

    Each launch runs under ``timeout`` seconds (killed past it: status 124); ``budget`` > 0
    caps the total: a configuration not started when it is spent is not run (status None is
    not used: it gets status 125 and no document).  ``progress(text)`` is called before each.
    A configuration with ``native`` set gets ``--native-label NAME -a none -c ITS_COLLS``
    (its native column only); ``extra(cfg)``, when given, gives those arguments instead
    (``verify``'s).  ``launch``: the command that starts ``-n P`` ranks (``sweep --launcher``,
    e.g. ``["srun"]``; default :func:`mpiexec`)."""
    start = time.monotonic()
    launches = []
    with tempfile.TemporaryDirectory(prefix="mpicoll-launch-") as tmp:
        for k, cfg in enumerate(configs):
            if budget and time.monotonic() - start > budget:
                launches.append(Launch(cfg, 125, 0.0, None, "not run: time budget spent"))
                continue
            part = Path(tmp) / f"part{k}.json"
            args = list(bench_args)
            if extra is not None:
                args += extra(cfg)
            elif cfg.native is not None:
                args += ["--native-label", cfg.native, "-a", "none",
                         "-c", ",".join(cfg.collectives)]
            cmd = [*(launch or mpiexec()), *cfg.flags, "-n", str(p), sys.executable, "-m",
                   "mpicoll", command, *args, "--json", str(part), "-q"]
            if progress is not None:
                progress(f"[mpicoll {command}] P = {p}: launch {k + 1}/{len(configs)}: "
                         f"{cfg.name} ({cfg.setting()})")
            t0 = time.monotonic()
            try:
                res = subprocess.run(cmd, env=_env(cfg.env), capture_output=True, text=True,
                                     timeout=timeout or None, check=False)
                status, output = res.returncode, res.stdout + res.stderr
            except subprocess.TimeoutExpired as exc:
                status = 124
                output = f"timed out after {timeout:g} s: {shlex.join(cmd)}\n" + (
                    (exc.stderr or b"").decode(errors="replace")
                    if isinstance(exc.stderr, bytes) else str(exc.stderr or ""))
            doc = json.loads(part.read_text()) if part.exists() else None
            evidence = ompi_selection(output) if cfg.native is not None else None
            output = "".join(ln for ln in output.splitlines(keepends=True)
                             if "coll:base:comm_select" not in ln and "disqualifying" not in ln)
            left = {f.name[len(part.name):]: f.read_text(errors="replace")
                    for f in Path(tmp).glob(part.name + ".rank*")}
            launches.append(Launch(cfg, status, time.monotonic() - t0, doc, output[-4000:],
                                   evidence, left))
    return launches


def merge(launches: Sequence[Launch], kind: str, version: str) -> dict[str, Any]:
    """One bench document from the launches' parts: the first part (the default
    configuration) gives provenance and settings; the records of the others are appended;
    ``provenance.launches`` lists every configuration with its settings, status and seconds,
    ``provenance.native_library`` the library.

    Raises:
        ValueError: no launch wrote a document.
    """
    from .report import summarize

    docs = [ln.doc for ln in launches if ln.doc is not None]
    if not docs:
        raise ValueError("no launch wrote results:\n" + "\n".join(
            f"{ln.config.name}: status {ln.status}: {ln.output[-800:]}" for ln in launches))
    base = dict(docs[0])
    records: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for ln in launches:
        if ln.doc is not None:
            records += ln.doc["results"]
            skipped += ln.doc.get("skipped", [])
    prov = dict(base["provenance"])
    prov["native_library"] = {"kind": kind, "version": version}
    prov["launches"] = [
        {"name": ln.config.name, "native": ln.config.native,
         "collectives": ln.config.collectives, "env": ln.config.env,
         "flags": ln.config.flags, "status": ln.status, "seconds": round(ln.seconds, 3),
         "evidence": ln.evidence,
         "error": None if ln.status == 0 or ln.doc is not None else ln.output[-800:]}
        for ln in launches
    ]
    base.update(provenance=prov, results=records, skipped=skipped, summary=summarize(records),
                wrong=sum(r["status"] in ("wrong", "error") for r in records))
    return base


def child_args(argv: Sequence[str], drop_value: set[str], drop_flag: set[str]) -> list[str]:
    """A driver's command-line arguments for its launches: ``argv`` less the options the driver
    itself handles (``drop_value``: options with a value, as ``-n 4`` or ``-n=4``; the values
    that follow are dropped up to the next option; ``drop_flag``: flags without one)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            if a.startswith("-"):
                skip = False
            else:
                continue
        key = a.split("=", 1)[0]
        if key in drop_value:
            skip = "=" not in a
            continue
        if a in drop_flag:
            continue
        out.append(a)
    return out


# ---- resuming a driver's file (sweep, verify --native-algorithms) ----------------------------


def add_launch_options(group: Any, *, budget: bool = False, fresh: bool = False,
                       what: str = "") -> None:
    """The options of a command that launches (``sweep``, ``bench`` and ``verify``
    ``--native-algorithms``, ``tune --check``): ``--launch-timeout``; with ``budget``,
    ``--budget``; with ``fresh``, ``--fresh`` (its ``--json`` file is read to resume unless
    given).  ``what``: the help's prefix naming when they apply (``"--native-algorithms: "``)."""
    group.add_argument("--launch-timeout", type=float, default=600.0, metavar="SECONDS",
                       help=f"{what}seconds one launch may take (default 600)")
    if budget:
        group.add_argument("--budget", type=float, default=0.0, metavar="SECONDS",
                           help=f"{what}seconds this invocation may launch for (0: no limit); "
                           "what is not started stays pending for the next run")
    if fresh:
        group.add_argument("--fresh", action="store_true",
                           help=f"{what}ignore an existing --json file and start over (else "
                           "it is read, and the launches it holds are not run again)")


def save_json(path: str | os.PathLike[str], doc: Any) -> None:
    """Write ``doc`` to ``path`` whole or not at all (a kill mid-write leaves the old file):
    a driver rewrites its file after every launch, so a run killed by a timeout or Ctrl-C
    keeps what finished."""
    tmp = f"{path}.tmp"
    Path(tmp).write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def resumed(path: str | os.PathLike[str] | None, fresh: bool) -> dict[str, Any]:
    """The driver file at ``path`` to resume from, parsed (empty: none, empty, or ``fresh``);
    :func:`resume_problem` has checked it."""
    if not path or fresh or not Path(path).exists() or not Path(path).stat().st_size:
        return {}
    doc = json.loads(Path(path).read_text())
    return doc if isinstance(doc, dict) else {}


def resume_problem(path: str | os.PathLike[str] | None, fresh: bool, schema: str,
                   settings: dict[str, Any], what: str) -> str | None:
    """Why the existing ``--json`` file at ``path`` cannot be resumed with ``settings`` (not
    a ``schema`` document of ``what``, or one of other settings: each differing key named);
    None if it can, or there is none, or ``fresh``."""
    if not path or fresh or not Path(path).exists() or not Path(path).stat().st_size:
        return None
    try:
        old = json.loads(Path(path).read_text())
    except ValueError as exc:
        return f"argument --json: {path} is not a {what} file ({exc}); use --fresh"
    if not isinstance(old, dict) or old.get("schema") != schema:
        return f"argument --json: {path} is not a {what} file; use --fresh to overwrite it"
    theirs = {k: old.get("settings", {}).get(k) for k in settings}
    if theirs != settings:
        diff = ", ".join(f"{k}: {theirs[k]} in the file, {settings[k]} now"
                         for k in settings if theirs[k] != settings[k])
        return (f"argument --json: {path} holds a {what} of other settings ({diff}); "
                "rerun with the same ones to resume, or --fresh to start over")
    return None


def config_dict(cfg: Config) -> dict[str, Any]:
    """``cfg`` as the JSON a driver's file keeps (:func:`config_of` reads it back)."""
    return {"name": cfg.name, "native": cfg.native, "collectives": list(cfg.collectives),
            "env": dict(cfg.env), "flags": list(cfg.flags), "nonblocking": cfg.nonblocking}


def config_of(d: dict[str, Any], nonblocking: bool | None = None) -> Config:
    """The :class:`Config` of :func:`config_dict`'s ``d`` (``nonblocking`` where ``d`` has
    none: a sweep's launches record)."""
    nb = d.get("nonblocking", nonblocking)
    return Config(d["name"], dict(d["env"]), list(d["flags"]), d["native"],
                  list(d["collectives"]), bool(nb))
