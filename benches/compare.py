#!/usr/bin/env python3
"""Side-by-side comparison of `effect-recon run` with DuckDB, MariaDB and a bare scan.

For each generated day (--orders N ...) or given snapshot (--snapshot PATH), this
  1. checks that the DuckDB SQL of docs/SEMANTICS.md (benches/duckdb_recon.sql) reproduces
     fixtures/tiny/expected/*.psv exactly, all columns;
  2. times, alternating, in child processes (wall time and peak RSS from wait4):
       effect-recon run     the tool itself
       duckdb recon         benches/duckdb_recon.sql over the same Parquet files
       mariadb missing      benches/mariadb_missing.sql over the day loaded into MariaDB
                            (warm buffer pool: one untimed run first)
       effect-recon scan    benches/bare_scan.sql through `effect-recon sql` (the floor)
       duckdb scan          the same scan in DuckDB
  3. fails loudly unless DuckDB and the run produce the same discrepancies (all columns),
     compensation tasks and skip verdicts, and MariaDB the same MISSING findings;
  4. writes benches/RESULTS.md.

See benches/README.md. The script re-executes itself inside benches/.venv (created on
first use, with duckdb from PyPI).
"""
from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

BENCHES = Path(__file__).resolve().parent
REPO = BENCHES.parent
VENV = BENCHES / ".venv"
TINY = REPO / "fixtures" / "tiny"
DEFAULT_RULES = REPO / "fixtures" / "rules.toml"
DEFAULT_BIN = Path.home() / ".cache/effect-recon/target/release/effect-recon"
MARIADB_DB = "effect_recon_bench"
MISSING_CLASSES = ("SKIPPED_BUT_DUE", "DONE_NO_RECEIPT", "REVIEW_STALLED", "NO_LEDGER_ENTRY")
OUTPUTS = {  # table -> (sort order, the columns the brief demands equal; the check compares all)
    "discrepancies": ("effect, order_id, class", "effect, order_id, class, verdict"),
    "compensation_tasks": ("effect, order_id, class",
                           "task_id, action, command, reopen_msg_id, reverse_receipt_ids, idempotency_key"),
    "skip_verdicts": ("order_id, decided_at, msg_id", "msg_id, verdict"),
}


class BenchError(Exception):
    """A failure the script reports in one clear line and exits 2 on."""


# --------------------------------------------------------------------------- venv

def ensure_venv() -> None:
    """Re-executes this script with benches/.venv's python, creating it with duckdb; an
    interpreter that already has duckdb (a machine without PyPI, wheels on PYTHONPATH) is
    used as it is."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    try:
        import duckdb  # noqa: F401
        return
    except ImportError:
        pass
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {VENV} (python -m venv; pip install duckdb)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    probe = subprocess.run([str(python), "-c", "import duckdb"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "duckdb"], check=True)
    os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])


# --------------------------------------------------------------------------- inputs

@dataclass
class Snapshot:
    """The files a snapshot's manifest lists, by table, and its cut."""
    path: Path
    cut: dt.datetime
    files: dict[str, list[str]]
    rows: dict[str, int]

    @staticmethod
    def open(path: Path) -> "Snapshot":
        manifest_path = path / "manifest.json"
        if not manifest_path.is_file():
            raise BenchError(f"{manifest_path}: no manifest.json (an incomplete or missing snapshot)")
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("format") != "effect-recon/snapshot@1":
            raise BenchError(f"{manifest_path}: format {manifest.get('format')!r} is not effect-recon/snapshot@1")
        files, rows = {}, {}
        for table in ("ledger", "status_history", "receipts"):
            entries = manifest.get("tables", {}).get(table, {}).get("files")
            if not entries:
                raise BenchError(f"{manifest_path}: table {table} lists no files")
            files[table] = [str(path / e["path"]) for e in entries]
            rows[table] = sum(int(e["rows"]) for e in entries)
        return Snapshot(path, parse_instant(manifest["cut"]), files, rows)


def parse_instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.timezone.utc)


GRACE_UNITS_US = {"ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}


def parse_grace(text: str, effect: str) -> int:
    """'1h 30m' -> microseconds (docs/CONTRACT.md: one or more <int><unit>, units ms s m h d)."""
    parts = text.split()
    if not parts:
        raise BenchError(f"rule {effect}: empty grace")
    total = 0
    for part in parts:
        match = re.fullmatch(r"(\d+)(ms|s|m|h|d)", part)
        if not match:
            raise BenchError(f"rule {effect}: bad grace {text!r}")
        total += int(match[1]) * GRACE_UNITS_US[match[2]]
    return total


def load_rules(path: Path) -> list[dict]:
    try:
        rules = tomllib.loads(path.read_text())["rule"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as err:
        raise BenchError(f"{path}: cannot read rules: {err}") from err
    for rule in rules:
        rule["grace_us"] = parse_grace(rule["grace"], rule["effect"])
        rule.setdefault("void_statuses", [])
        # DESIGN §10.1: both optional; absent = false / no reversal command.
        rule.setdefault("reverse_on_void", False)
        rule.setdefault("reversal", None)
        if not isinstance(rule["reverse_on_void"], bool):
            raise BenchError(f"{path}: rule {rule['effect']}: reverse_on_void must be true or false")
        if rule["reverse_on_void"] and rule["reversal"] is None:
            raise BenchError(f"{path}: rule {rule['effect']}: reverse_on_void = true needs a reversal")
    return rules


# --------------------------------------------------------------------------- duckdb

def duckdb_session(snapshot: Snapshot, rules: list[dict], threads: int | None,
                   cut: dt.datetime, since: dt.datetime):
    """A DuckDB connection with the snapshot as views, the rules as tables, cut and since."""
    import duckdb
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    for table, files in snapshot.files.items():
        listing = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{listing}], "
                    "hive_partitioning = false, union_by_name = true)")
    con.execute("CREATE TABLE rules (effect VARCHAR, trigger_event VARCHAR, due_status VARCHAR, "
                "grace INTERVAL, compensation VARCHAR, priority INTEGER, "
                "reverse_on_void BOOLEAN NOT NULL, reversal VARCHAR)")
    con.execute("CREATE TABLE rule_voids (effect VARCHAR, status VARCHAR)")
    for r in rules:
        con.execute("INSERT INTO rules VALUES (?, ?, ?, to_microseconds(?), ?, ?, ?, ?)",
                    [r["effect"], r["trigger_event"], r["due_status"], r["grace_us"], r["compensation"], r["priority"],
                     r["reverse_on_void"], r["reversal"]])
        for status in r["void_statuses"]:
            con.execute("INSERT INTO rule_voids VALUES (?, ?)", [r["effect"], status])
    con.execute("SET VARIABLE cut = ?::TIMESTAMPTZ", [cut])
    con.execute("SET VARIABLE since = ?::TIMESTAMPTZ", [since])
    return con


def sql_statements(path: Path) -> list[str]:
    """Statements of a SQL file, split at a ';' that ends a line."""
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in re.split(r";\s*$", text, flags=re.M) if s.strip()]


def check_row_counts(con, snapshot: Snapshot) -> None:
    """The manifest's row counts must match the files (from Parquet footers, as the run does)."""
    for table, files in snapshot.files.items():
        listing = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        (rows,) = con.execute(f"SELECT sum(num_rows) FROM parquet_file_metadata([{listing}])").fetchone()
        if rows != snapshot.rows[table]:
            raise BenchError(f"{snapshot.path}: {table} has {rows} rows, the manifest says {snapshot.rows[table]}")


def duckdb_recon(con, snapshot: Snapshot, out: Path | None) -> dict[str, list[tuple]] | None:
    """Runs duckdb_recon.sql; writes the three outputs to `out` (or returns them)."""
    check_row_counts(con, snapshot)
    for statement in sql_statements(BENCHES / "duckdb_recon.sql"):
        con.execute(statement)
    duplicates = con.execute("SELECT * FROM duplicate_msg_ids").fetchall()
    if duplicates:
        raise BenchError(f"{snapshot.path}: ledger has duplicate msg_id {duplicates}")
    results = {}
    for table, (order, _) in OUTPUTS.items():
        query = f"SELECT * FROM {table} ORDER BY {order}"
        if out is None:
            cursor = con.execute(query)
            results[table] = ([d[0] for d in cursor.description], cursor.fetchall())
        else:
            (out / table).mkdir(parents=True, exist_ok=True)
            con.execute(f"COPY ({query}) TO '{out / table / 'part-00000.parquet'}' (FORMAT parquet)")
    return results or None


def duckdb_worker(args) -> None:
    """Child process: one timed DuckDB recon or scan; prints its own timing as JSON."""
    started = time.perf_counter()
    snapshot = Snapshot.open(Path(args.snapshot))
    cut = snapshot.cut
    con = duckdb_session(snapshot, load_rules(Path(args.rules)), args.threads, cut, cut - dt.timedelta(days=1))
    if args.mode == "recon":
        out = Path(args.out)
        shutil.rmtree(out, ignore_errors=True)
        duckdb_recon(con, snapshot, out)
    else:
        con.execute((BENCHES / "bare_scan.sql").read_text()).fetchall()
    print(json.dumps({"engine_ms": round((time.perf_counter() - started) * 1000)}))


# --------------------------------------------------------------------------- tiny check

def psv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        value = value.astimezone(dt.timezone.utc)
        fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if value.microsecond else "%Y-%m-%dT%H:%M:%SZ"
        return value.strftime(fmt)
    if isinstance(value, list):
        return "[" + ", ".join(psv_cell(v) for v in value) + "]"
    return str(value)


def validate_on_tiny(rules_path: Path) -> str:
    """The DuckDB SQL must reproduce the hand-checked fixture outputs exactly."""
    snapshot = Snapshot.open(TINY / "snapshot")
    con = duckdb_session(snapshot, load_rules(rules_path), 1, snapshot.cut, snapshot.cut - dt.timedelta(days=1))
    results = duckdb_recon(con, snapshot, None)
    counts = []
    for table, (columns, rows) in results.items():
        got = "|".join(columns) + "\n" + "".join("|".join(psv_cell(v) for v in row) + "\n" for row in rows)
        # The DuckDB SQL implements the single-night semantics (DESIGN §5); the lifecycle
        # columns of §9 that follow them in the expected files are not its to produce.
        expected = "".join("|".join(line.split("|")[:len(columns)]) + "\n"
                           for line in (TINY / "expected" / f"{table}.psv").read_text().splitlines())
        if got != expected:
            diff = [f"  expected: {e}\n  duckdb:   {g}" for e, g in
                    zip(expected.splitlines(), got.splitlines()) if e != g]
            raise BenchError(f"duckdb_recon.sql disagrees with fixtures/tiny/expected/{table}.psv "
                             f"({len(rows)} rows vs {expected.count(chr(10)) - 1}):\n" + "\n".join(diff[:20]))
        counts.append(f"{table} {len(rows)}")
    return ", ".join(counts)


# --------------------------------------------------------------------------- children

@dataclass
class Measurement:
    wall_s: float
    maxrss_kib: int
    stdout: str
    engine_ms: int | None = None


GNU_TIME = "/usr/bin/time"


def run_child(cmd: list[str], timeout: float, what: str, env: dict | None = None) -> Measurement:
    """Runs `cmd`, returns its wall time and peak RSS; fails on non-zero exit or timeout.

    The RSS comes from GNU time's %M: a child forked from this Python (DuckDB loaded) would
    report this process's RSS at fork as its own peak (Linux carries it across exec), so the
    measured process is forked from the small `time` process instead. Without GNU time the
    wait4 figure is used and is only an upper bound."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        wrapped = [GNU_TIME, "-f", "%M", "-o", rss.name, *cmd] if os.access(GNU_TIME, os.X_OK) else cmd
        started = time.perf_counter()
        try:
            proc = subprocess.Popen(wrapped, stdout=out, stderr=err, env=env, start_new_session=True)
        except OSError as error:
            raise BenchError(f"{what}: cannot start {cmd[0]}: {error}") from error
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        measured = rss.read().split()
        maxrss_kib = int(measured[-1]) if wrapped is not cmd and measured and measured[-1].isdigit() else usage.ru_maxrss
    if timed_out.is_set():
        raise BenchError(f"{what}: timed out after {timeout:g}s: {' '.join(cmd)}")
    if proc.returncode != 0:
        raise BenchError(f"{what}: exit {proc.returncode}: {' '.join(cmd)}\n{stderr.strip()[-3000:]}")
    return Measurement(wall, maxrss_kib, stdout)


def reported_ms(stdout: str) -> int | None:
    """The run's own 'time: validate 47ms, reconcile 451ms, write 6ms' line, summed."""
    match = re.search(r"^time: (.*)$", stdout, flags=re.M)
    return sum(int(ms) for ms in re.findall(r"(\d+)ms", match[1])) if match else None


def has_gen(binary: Path) -> bool:
    return subprocess.run([str(binary), "gen", "--help"], capture_output=True).returncode == 0


def generate(binary: Path, out: Path, orders: int, seed: int, timeout: float, regenerate: bool) -> Snapshot:
    """`effect-recon gen`; an existing complete snapshot (manifest.json) is reused."""
    if (out / "manifest.json").is_file() and not regenerate:
        print(f"  reusing {out} (--regen to rebuild)")
        return Snapshot.open(out)
    if not has_gen(binary):
        raise BenchError(f"{binary} has no `gen` subcommand yet: use --snapshot PATH instead of --orders")
    shutil.rmtree(out, ignore_errors=True)
    m = run_child([str(binary), "gen", "--out", str(out), "--orders", str(orders), "--seed", str(seed)],
                  timeout, f"gen --orders {orders}")
    print(f"  generated {out} in {m.wall_s:.1f}s")
    return Snapshot.open(out)


# --------------------------------------------------------------------------- mariadb

class MariaDB:
    """The `mariadb` client against the bench database (created here, dropped at the end)."""

    def __init__(self, host: str, port: int, user: str, timeout: float):
        self.base = ["mariadb", f"--host={host}", f"--port={port}", f"--user={user}", "--batch",
                     "--skip-column-names", "--local-infile=1", "--default-character-set=utf8mb4"]
        self.timeout = timeout
        if shutil.which("mariadb") is None:
            raise BenchError("the `mariadb` client is not on PATH (or use --skip-mariadb)")

    def command(self, sql: str, database: str | None = MARIADB_DB) -> list[str]:
        return [*self.base, *([database] if database else []), "-e", sql]

    def query(self, sql: str, what: str, database: str | None = MARIADB_DB) -> list[list[str]]:
        out = run_child(self.command(sql, database), self.timeout, what).stdout
        return [line.split("\t") for line in out.splitlines()]

    def drop(self) -> None:
        subprocess.run(self.command(f"DROP DATABASE IF EXISTS {MARIADB_DB}", None), capture_output=True,
                       timeout=self.timeout)

    def server_rss_mib(self) -> tuple[float, float] | None:
        """mariadbd's current and peak RSS (the buffer pool included), when readable."""
        try:
            pid_file = self.query("SELECT @@pid_file", "pid_file", None)[0][0]
            status = Path(f"/proc/{Path(pid_file).read_text().strip()}/status").read_text()
        except (OSError, BenchError, IndexError):
            return None
        kib = {k: int(v.split()[0]) for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(.*)$", status, flags=re.M)}
        return kib.get("VmRSS", 0) / 1024, kib.get("VmHWM", 0) / 1024


def parse_size(text: str) -> int:
    """'6G', '512M', '1048576' -> bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    text = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def mariadb_time(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def mariadb_load(db: MariaDB, con, snapshot: Snapshot, rules: list[dict], work: Path) -> dict:
    """Loads the day: DuckDB writes TSV, LOAD DATA LOCAL INFILE reads it; then indexes."""
    columns = {
        "ledger": ["msg_id", "order_id", "event_type", "expected_status", "action", "observed_status",
                   "topic", "kafka_partition", "kafka_offset", "consumer_id", "decided_at"],
        "status_history": ["order_id", "status", "changed_at"],
        "receipts": ["receipt_id", "order_id", "effect", "msg_id", "status", "created_at"],
    }
    times = {"ledger": "decided_at", "status_history": "changed_at", "receipts": "created_at"}
    started = time.perf_counter()
    step = lambda what: print(f"    {what}: {time.perf_counter() - started:.1f}s", flush=True)  # noqa: E731
    db.drop()
    db.query(f"CREATE DATABASE {MARIADB_DB}", "create database", None)
    db.query((BENCHES / "mariadb_schema.sql").read_text(), "mariadb_schema.sql")
    loads = []
    for table, cols in columns.items():
        strings = [c for c in cols if c not in ("order_id", "kafka_partition", "kafka_offset", times[table])]
        unsafe = " OR ".join(f"regexp_matches({c}, '[\\t\\n\\\\]')" for c in strings)
        (bad,) = con.execute(f"SELECT count(*) FROM {table} WHERE {unsafe}").fetchone()
        if bad:
            raise BenchError(f"{table}: {bad} rows hold a tab, newline or backslash; the TSV load cannot carry them")
        select = ", ".join(f"strftime({c}, '%Y-%m-%d %H:%M:%S.%f')" if c == times[table] else c for c in cols)
        tsv = work / f"{table}.tsv"
        con.execute(f"COPY (SELECT {select} FROM {table}) TO '{tsv}' "
                    "(FORMAT csv, DELIMITER '\t', HEADER false, NULLSTR '\\N', QUOTE '', ESCAPE '')")
        loads.append(f"LOAD DATA LOCAL INFILE '{tsv}' INTO TABLE {table} CHARACTER SET utf8mb4 "
                     f"FIELDS TERMINATED BY '\\t' LINES TERMINATED BY '\\n' ({', '.join(cols)});")
    for r in rules:
        loads.append(f"INSERT INTO rules VALUES ('{r['effect']}', '{r['trigger_event']}', '{r['due_status']}', {r['grace_us']});")
        loads += [f"INSERT INTO rule_voids VALUES ('{r['effect']}', '{s}');" for s in r["void_statuses"]]
    step("TSV written")
    db.query("SET time_zone = '+00:00'; " + " ".join(loads), "LOAD DATA")
    step("LOAD DATA done")
    db.query((BENCHES / "mariadb_indexes.sql").read_text(), "mariadb_indexes.sql")
    step("indexes built")
    for table in columns:
        (count,) = db.query(f"SELECT count(*) FROM {table}", f"count {table}")[0]
        if int(count) != snapshot.rows[table]:
            raise BenchError(f"MariaDB {table}: loaded {count} rows, the snapshot has {snapshot.rows[table]}")
    for table in columns:
        (work / f"{table}.tsv").unlink()
    size = db.query("SELECT sum(data_length + index_length) FROM information_schema.tables "
                    f"WHERE table_schema = '{MARIADB_DB}'", "size")[0][0]
    pool = db.query("SELECT @@innodb_buffer_pool_size", "buffer pool", None)[0][0]
    return {"load_s": time.perf_counter() - started, "data_bytes": int(size), "buffer_pool_bytes": int(pool)}


def mariadb_sql(file: str, cut: dt.datetime, since: dt.datetime, rules: list[dict]) -> str:
    lo = since - dt.timedelta(microseconds=max(r["grace_us"] for r in rules))
    return (f"SET time_zone = '+00:00'; SET @cut = '{mariadb_time(cut)}'; SET @since = '{mariadb_time(since)}'; "
            f"SET @lo = '{mariadb_time(lo)}';\n" + (BENCHES / file).read_text())


# --------------------------------------------------------------------------- checks

def run_tables(con, run_dir: Path) -> None:
    """Registers the run's outputs (the files its manifest lists) as run_<table> views."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for table in OUTPUTS:
        files = ", ".join(f"'{run_dir / f['path']}'" for f in manifest["tables"][table]["files"])
        con.execute(f"CREATE OR REPLACE VIEW run_{table} AS SELECT * FROM read_parquet([{files}], hive_partitioning = false)")


def differences(con, left: str, right: str, columns: str, limit: int = 20) -> tuple[list, list]:
    only_left = con.execute(f"SELECT {columns} FROM {left} EXCEPT ALL SELECT {columns} FROM {right} "
                            f"ORDER BY ALL LIMIT {limit}").fetchall()
    only_right = con.execute(f"SELECT {columns} FROM {right} EXCEPT ALL SELECT {columns} FROM {left} "
                             f"ORDER BY ALL LIMIT {limit}").fetchall()
    return only_left, only_right


def check_duckdb_equals_run(run_dir: Path, duck_dir: Path) -> str:
    import duckdb
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    run_tables(con, run_dir)
    problems, counts = [], []
    for table, (_, keys) in OUTPUTS.items():
        con.execute(f"CREATE VIEW duck_{table} AS SELECT * FROM read_parquet('{duck_dir / table}/*.parquet', "
                    "hive_partitioning = false)")
        run_schema = con.execute(f"SELECT column_name, column_type FROM (DESCRIBE run_{table})").fetchall()
        duck_schema = con.execute(f"SELECT column_name, column_type FROM (DESCRIBE duck_{table})").fetchall()
        # The run's lifecycle columns (DESIGN §9) follow the single-night ones DuckDB computes.
        run_schema = run_schema[:len(duck_schema)]
        if run_schema != duck_schema:
            problems.append(f"{table}: columns or types differ\n  run:    {run_schema}\n  duckdb: {duck_schema}")
            continue
        run_cols = [name for name, _ in run_schema]
        for level, cols in (("key columns " + keys, keys), ("all columns", ", ".join(run_cols))):
            only_run, only_duck = differences(con, f"run_{table}", f"duck_{table}", cols)
            if only_run or only_duck:
                rows = [f"  only in run:    {r}" for r in only_run] + [f"  only in duckdb: {r}" for r in only_duck]
                problems.append(f"{table}: {level} differ (first {len(rows)} rows)\n" + "\n".join(rows))
                break
        (n,) = con.execute(f"SELECT count(*) FROM run_{table}").fetchone()
        counts.append(f"{table} {n}")
    if problems:
        raise BenchError("DuckDB and effect-recon run disagree:\n" + "\n".join(problems))
    return ", ".join(counts)


def load_rows(con, name: str, columns: str, rows: list[list[str]]) -> None:
    """The mariadb client's tab-separated rows as a DuckDB table (through a file: fast)."""
    con.execute(f"CREATE TABLE {name} ({columns})")
    if not rows:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".tsv") as tsv:
        tsv.write("".join("\t".join(row) + "\n" for row in rows))
        tsv.flush()
        con.execute(f"INSERT INTO {name} SELECT * FROM read_csv('{tsv.name}', delim = '\t', header = false, "
                    f"quote = '', escape = '', auto_detect = false, columns = {{{sql_columns(columns)}}})")


def sql_columns(columns: str) -> str:
    return ", ".join(f"'{c.split()[0]}': '{c.split()[1]}'" for c in columns.split(", "))


def check_mariadb_equals_run(run_dir: Path, rows: list[list[str]]) -> str:
    import duckdb
    con = duckdb.connect()
    run_tables(con, run_dir)
    load_rows(con, "maria", "effect VARCHAR, order_id BIGINT, class VARCHAR, verdict VARCHAR", rows)
    classes = ", ".join(f"'{c}'" for c in MISSING_CLASSES)
    con.execute(f"CREATE VIEW run_missing AS SELECT * FROM run_discrepancies WHERE class IN ({classes})")
    only_run, only_maria = differences(con, "run_missing", "maria", "effect, order_id, class, verdict")
    if only_run or only_maria:
        lines = [f"  only in run:     {r}" for r in only_run] + [f"  only in mariadb: {r}" for r in only_maria]
        raise BenchError("MariaDB MISSING findings and effect-recon run disagree:\n" + "\n".join(lines))
    return f"{len(rows)} missing findings"


def narrow_coverage(run_dir: Path, rows: list[list[str]]) -> str:
    """How many of the run's missing findings the SKIPPED-rows-only query sees."""
    import duckdb
    con = duckdb.connect()
    run_tables(con, run_dir)
    load_rows(con, "narrow", "effect VARCHAR, order_id BIGINT", rows)
    classes = ", ".join(f"'{c}'" for c in MISSING_CLASSES)
    by_class = con.execute(f"""
        SELECT d.class, count(*) AS total, count(n.order_id) AS seen
        FROM run_discrepancies d LEFT JOIN narrow n USING (effect, order_id)
        WHERE d.class IN ({classes}) GROUP BY d.class ORDER BY d.class""").fetchall()
    return "; ".join(f"{c} {seen}/{total}" for c, total, seen in by_class) or "no missing findings"


# --------------------------------------------------------------------------- bench

@dataclass
class Case:
    label: str
    snapshot: Snapshot
    threads: int
    samples: dict[str, list[Measurement]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    commands: dict[str, str] = field(default_factory=dict)


def pinned(threads: int, args) -> list[str]:
    """`taskset -c 0-(T-1)`: both engines get the same T cores (when --pin and T fit)."""
    if not args.pin or threads > (os.cpu_count() or 1) or not shutil.which("taskset"):
        return []
    return ["taskset", "-c", f"0-{threads - 1}"]


def bench_case(case: Case, args, binary: Path, rules: list[dict], work: Path) -> None:
    snap = case.snapshot
    cut, since = snap.cut, snap.cut - dt.timedelta(days=1)
    run_out, duck_out = work / "run-out", work / "duckdb-out"
    threads = str(case.threads)
    pin = pinned(case.threads, args)
    worker = [*pin, sys.executable, str(Path(__file__).resolve()), "_duckdb-worker", "--snapshot", str(snap.path),
              "--rules", str(args.rules), "--threads", threads]
    engines: dict[str, list[str] | None] = {
        "effect-recon run": [*pin, str(binary), "run", "--snapshot", str(snap.path), "--out", str(run_out),
                             "--rules", str(args.rules), "--replace", "--target-partitions", threads, "-q"],
        "duckdb recon": None if args.skip_duckdb else [*worker, "--mode", "recon", "--out", str(duck_out)],
        "mariadb missing (warm)": None,
        "effect-recon bare scan": None if args.skip_scan else [
            *pin, str(binary), "sql", "--snapshot", str(snap.path), "--target-partitions", threads,
            "-f", str(BENCHES / "bare_scan.sql"), "--format", "csv"],
        "duckdb bare scan": None if args.skip_duckdb or args.skip_scan else [*worker, "--mode", "scan"],
    }
    db = None
    if not args.skip_mariadb:
        db = MariaDB(args.mariadb_host, args.mariadb_port, args.mariadb_user, args.timeout)
        previous_pool = db.query("SELECT @@innodb_buffer_pool_size", "buffer pool", None)[0][0]
        if args.buffer_pool:
            db.query(f"SET GLOBAL innodb_buffer_pool_size = {parse_size(args.buffer_pool)}", "resize buffer pool", None)
            time.sleep(2)  # the resize finishes in the background
        con = duckdb_session(snap, rules, case.threads, cut, since)
        info = mariadb_load(db, con, snap, rules, work)
        con.close()
        print(f"  MariaDB: loaded {MARIADB_DB} in {info['load_s']:.1f}s (not timed below)")
        case.notes.append(f"MariaDB load (not timed below): {info['load_s']:.1f}s; tables + indexes "
                          f"{info['data_bytes'] / 2**20:.0f} MiB, innodb_buffer_pool_size "
                          f"{info['buffer_pool_bytes'] / 2**20:.0f} MiB"
                          + (" — the data does NOT fit in the buffer pool" if info["data_bytes"] > info["buffer_pool_bytes"] else ""))
        engines["mariadb missing (warm)"] = db.command(mariadb_sql("mariadb_missing.sql", cut, since, rules))
    engines = {name: cmd for name, cmd in engines.items() if cmd is not None}
    case.commands = {name: " ".join(cmd if "mariadb" not in name else [*cmd[:-1], "'<SET @cut, @since, @lo; benches/mariadb_missing.sql>'"])
                     for name, cmd in engines.items()}

    rounds = ["warm-up"] * (0 if args.no_warmup else 1) + [f"rep {i + 1}" for i in range(args.reps)]
    for index, label in enumerate(rounds):
        for name, cmd in engines.items():
            m = run_child(cmd, args.timeout, f"{case.label}: {name}")
            if name == "effect-recon run":
                m.engine_ms = reported_ms(m.stdout)
            elif name.startswith("duckdb"):
                m.engine_ms = json.loads(m.stdout.strip().splitlines()[-1])["engine_ms"]
            elif name.startswith("mariadb"):
                maria_rows = [line.split("\t") for line in m.stdout.splitlines()]
            if label != "warm-up":
                case.samples.setdefault(name, []).append(m)
            print(f"  {label:8} {name:24} {m.wall_s:8.3f}s  {m.maxrss_kib / 1024:8.1f} MiB")
        if index == 0:
            check_outputs(case, args, db, maria_rows if db else None, run_out, duck_out, cut, since, rules)
    if db and args.buffer_pool:
        db.query(f"SET GLOBAL innodb_buffer_pool_size = {previous_pool}", "restore buffer pool", None)
    if db:
        rss = db.server_rss_mib()
        if rss:
            case.notes.append(f"mariadbd RSS after the timed queries: {rss[0]:.0f} MiB (peak {rss[1]:.0f} MiB), "
                              "buffer pool included; the client's RSS is what the table shows")


def check_outputs(case: Case, args, db, maria_rows, run_out: Path, duck_out: Path,
                  cut: dt.datetime, since: dt.datetime, rules: list[dict]) -> None:
    runs = glob.glob(str(run_out / "run=*" / "manifest.json"))
    if len(runs) != 1:
        raise BenchError(f"{run_out}: expected one run=<id>/manifest.json, found {runs}")
    run_dir = Path(runs[0]).parent
    if not args.skip_duckdb:
        msg = f"DuckDB == effect-recon run, all columns ({check_duckdb_equals_run(run_dir, duck_out)})"
        print(f"  check: {msg}")
        case.notes.append(msg)
    if db:
        msg = f"MariaDB == effect-recon run on (effect, order_id, class, verdict) of {check_mariadb_equals_run(run_dir, maria_rows)}"
        print(f"  check: {msg}")
        case.notes.append(msg)
        narrow = run_child(db.command(mariadb_sql("mariadb_skipped_only.sql", cut, since, rules)), args.timeout,
                           "mariadb_skipped_only.sql")
        rows = [line.split("\t") for line in narrow.stdout.splitlines()]
        msg = (f"the narrow 'SKIPPED rows only' query (mariadb_skipped_only.sql, {narrow.wall_s:.3f}s, run once) "
               f"sees, of the run's missing findings: "
               f"{narrow_coverage(run_dir, rows)} — it cannot see DONE_NO_RECEIPT, REVIEW_STALLED or NO_LEDGER_ENTRY")
        print(f"  note: {msg}")
        case.notes.append(msg)


# --------------------------------------------------------------------------- report

def machine() -> list[str]:
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), platform.processor())
    mem = next(int(l.split()[1]) for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal"))
    return [f"nproc {os.cpu_count()}", f"memory {mem / 2**20:.1f} GiB", f"CPU {cpu}",
            f"kernel {platform.release()}", f"python {platform.python_version()}",
            "load average at the end (1/5/15 min): " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
            + " — other work on the machine skews the timings"]


def versions(binary: Path, args) -> list[str]:
    import duckdb
    out = [subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout.strip()
           + f" ({binary})", f"duckdb {duckdb.__version__} (Python package)"]
    if not args.skip_mariadb:
        out.append("MariaDB " + MariaDB(args.mariadb_host, args.mariadb_port, args.mariadb_user, 60)
                   .query("SELECT version()", "version", None)[0][0])
    return out


def table(case: Case) -> list[str]:
    s = case.snapshot
    med = {name: statistics.median(m.wall_s for m in ms) for name, ms in case.samples.items()}
    lines = [f"### {case.label}", "",
             f"rows in: ledger {s.rows['ledger']:,}, status_history {s.rows['status_history']:,}, "
             f"receipts {s.rows['receipts']:,} ({s.path})", "",
             "| engine | wall median | each rep | peak RSS (max) | engine-reported | effect-recon run ÷ this |",
             "|---|---:|---|---:|---:|---:|"]
    base = med.get("effect-recon run")
    for name, ms in case.samples.items():
        reps = ", ".join(f"{m.wall_s:.3f}" for m in ms)
        reported = [m.engine_ms for m in ms if m.engine_ms is not None]
        rep = f"{statistics.median(reported):.0f} ms" if reported else "—"
        ratio = f"{base / med[name]:.2f}×" if base and med[name] else "—"
        lines.append(f"| {name} | {med[name]:.3f} s | {reps} | {max(m.maxrss_kib for m in ms) / 1024:.1f} MiB "
                     f"| {rep} | {ratio} |")
    lines.append("")
    lines += [f"* {n}" for n in case.notes]
    lines += ["", "Commands:", "", "```"] + [f"# {n}\n{c}" for n, c in case.commands.items()] + ["```", ""]
    return lines


def sweep_table(cases: list[Case]) -> list[str]:
    """One line per (day, T): the run against DuckDB, the ratio the scaling is judged by."""
    lines = ["### Threads sweep", "", "| day | T | effect-recon run | duckdb recon | run ÷ DuckDB |", "|---|---:|---:|---:|---:|"]
    for case in cases:
        med = {name: statistics.median(m.wall_s for m in ms) for name, ms in case.samples.items()}
        run, duck = med.get("effect-recon run"), med.get("duckdb recon")
        ratio = f"{run / duck:.2f}" if run and duck else "—"
        day = case.label.rsplit(", T = ", 1)[0]
        lines.append(f"| {day} | {case.threads} | {run or 0:.3f} s | {duck or 0:.3f} s | {ratio} |")
    return lines + [""]


def write_results(path: Path, cases: list[Case], args, binary: Path, argv: list[str]) -> None:
    tried = "## What we tried\n\n_(left for the lead: what was changed in the engine and what it did to these numbers)_\n"
    if path.exists():
        old = path.read_text()
        at = old.find("## What we tried")
        if at >= 0:
            tried = old[at:]
    lines = ["# effect-recon side by side", "",
             f"Written by `benches/compare.py` on {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}"
             + (" — **debug binary: timings are not representative**" if "/debug/" in str(binary) else "") + ".", "",
             "Command:", "", "```", "python3 benches/compare.py " + " ".join(argv), "```", "",
             "## Machine", ""] + [f"* {m}" for m in machine() + versions(binary, args)] + [
             "", "## Method", "",
             f"Each engine runs as a child process; wall time is the process's wall clock, peak RSS its "
             f"maximum resident set size from GNU `time -f %M` (DuckDB runs in a child Python, so its RSS "
             f"includes the interpreter and the duckdb module). Engines alternate within each repetition ({args.reps} reps"
             f"{'' if args.no_warmup else ', after one untimed warm-up round'}); threads T = {', '.join(map(str, args.threads))} "
             "(`--target-partitions` for effect-recon, `SET threads` for DuckDB)"
             + (", both pinned to cores 0..T-1 with `taskset`" if args.pin else "") + ". `engine-reported` is the run's "
             "own `time:` line summed (validate + reconcile + write) or DuckDB's time after imports. The DuckDB recon "
             "(`benches/duckdb_recon.sql`, an independent SQL of docs/SEMANTICS.md) reads the same Parquet files, checks "
             "row counts and msg_id uniqueness as the run does, and writes the same three tables to Parquet. "
             "MariaDB runs `benches/mariadb_missing.sql` (MISSING findings only, NOT EXISTS, natural indexes on "
             "order_id and the time columns), timed through the `mariadb` client after the load, with a warm "
             "buffer pool. The bare scan (`benches/bare_scan.sql`) reads every column the reconciliation reads.",
             "", "## Results", ""]
    if len(args.threads) > 1:
        lines += sweep_table(cases)
    for case in cases:
        lines += table(case)
    path.write_text("\n".join(lines) + "\n" + tried)


# --------------------------------------------------------------------------- main

def parse_args(argv: list[str]):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--orders", type=int, nargs="*", default=[], metavar="N",
                   help="generate a 24-partition day of N orders with `effect-recon gen` (several sizes allowed)")
    p.add_argument("--snapshot", type=Path, action="append", default=[], help="an existing snapshot (repeatable)")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per engine (default 3)")
    p.add_argument("--threads", type=int, nargs="+", default=[os.cpu_count()], metavar="T",
                   help="threads / target partitions; several values sweep (default nproc)")
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                   help="pin both engines to cores 0..T-1 with taskset (default on)")
    p.add_argument("--seed", type=int, default=7, help="gen seed (default 7)")
    p.add_argument("--rules", type=Path, default=DEFAULT_RULES, help="rules TOML (default fixtures/rules.toml)")
    p.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "effect-recon-bench",
                   help="generated snapshots and outputs (default /tmp/effect-recon-bench)")
    p.add_argument("--results", type=Path, default=BENCHES / "RESULTS.md", help="report (default benches/RESULTS.md)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per child process (default 3600)")
    p.add_argument("--regen", action="store_true", help="regenerate snapshots that already exist")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up round")
    p.add_argument("--skip-duckdb", action="store_true")
    p.add_argument("--skip-mariadb", action="store_true")
    p.add_argument("--skip-scan", action="store_true", help="leave out both bare scans")
    p.add_argument("--buffer-pool", default="6G",
                   help="innodb_buffer_pool_size during the MariaDB timing, restored afterwards, so the "
                        "query is timed warm with the day in memory (default 6G; '' keeps the server's)")
    p.add_argument("--keep-mariadb", action="store_true", help=f"leave the {MARIADB_DB} database in place")
    p.add_argument("--mariadb-host", default="127.0.0.1")
    p.add_argument("--mariadb-port", type=int, default=3306)
    p.add_argument("--mariadb-user", default="root")
    args = p.parse_args(argv)
    if not args.orders and not args.snapshot:
        p.error("give --orders N [N ...] and/or --snapshot PATH")
    if args.reps < 1 or min(args.threads) < 1:
        p.error("--reps and --threads must be at least 1")
    args.rules = args.rules.resolve()
    return args


def worker_args(argv: list[str]):
    p = argparse.ArgumentParser(prog="compare.py _duckdb-worker")
    p.add_argument("--snapshot", required=True)
    p.add_argument("--rules", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--mode", choices=["recon", "scan"], required=True)
    p.add_argument("--out")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["_duckdb-worker"]:
        duckdb_worker(worker_args(argv[1:]))
        return 0
    args = parse_args(argv)
    binary = Path(os.environ.get("EFFECT_RECON_BIN", DEFAULT_BIN))
    if not os.access(binary, os.X_OK):
        raise BenchError(f"no effect-recon binary at {binary} (set EFFECT_RECON_BIN)")
    rules = load_rules(args.rules)
    print(f"binary: {binary}")
    if not args.skip_duckdb:
        print(f"check: duckdb_recon.sql == fixtures/tiny/expected, all columns ({validate_on_tiny(args.rules)})")
    cases = []
    for path in args.snapshot:
        cases.append(("snapshot " + str(path), lambda path=path: Snapshot.open(path.resolve()), f"snap-{len(cases)}"))
    for n in args.orders:
        cases.append((f"{n:,} orders (gen --seed {args.seed})",
                      lambda n=n: generate(binary, args.work_dir / f"orders-{n}-seed-{args.seed}" / "snapshot",
                                           n, args.seed, args.timeout, args.regen), f"orders-{n}-seed-{args.seed}"))
    done = []
    try:
        for label, open_snapshot, name in cases:
            snapshot = open_snapshot()
            for threads in args.threads:
                print(f"{label}, T = {threads}")
                work = args.work_dir / name
                work.mkdir(parents=True, exist_ok=True)
                case = Case(f"{label}, T = {threads}", snapshot, threads)
                bench_case(case, args, binary, rules, work)
                done.append(case)
                # Written after every case: a run stopped by a time limit keeps what it measured.
                write_results(args.results, done, args, binary, argv)
    finally:
        if not args.skip_mariadb and not args.keep_mariadb:
            try:
                MariaDB(args.mariadb_host, args.mariadb_port, args.mariadb_user, 120).drop()
            except (BenchError, OSError, subprocess.SubprocessError) as error:
                print(f"compare.py: warning: could not drop {MARIADB_DB}: {error}", file=sys.stderr)
    write_results(args.results, done, args, binary, argv)
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    ensure_venv()
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as error:
        print(f"compare.py: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
