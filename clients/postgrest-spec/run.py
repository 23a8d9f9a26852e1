#!/usr/bin/env python3
"""Runs PostgREST's own query spec suite against Rowgate on PostgreSQL and reports what passes.

    python3 clients/postgrest-spec/run.py --postgrest ../postgrest [--only REGEX] [--failures F]

`--postgrest` is a checkout of https://github.com/PostgREST/postgrest (the commit the figures in
docs/postgrest-differences.md were measured on is named there). The runner starts a PostgreSQL
cluster from the installed binaries, loads PostgREST's fixtures (test/spec/fixtures/load.sql;
statements needing PostGIS, which is not installed, fail and are skipped), starts Rowgate (one
server per configuration the specs ask for) with the fixtures' roles, GRANTs and policies
deciding (`auth.database_roles`; `--grants`: every test role granted everything instead, the
figures before it) and `rest.tx_end = "rollback-allow-override"` (PostgREST's test setting: nothing a case writes
persists), and replays each `it` case of test/spec/Feature/Query/*.hs: every request in order,
each response held to the spec's status, body (JSON compared as JSON, text byte for byte) and
headers. It prints passes per spec file; `--failures F` writes each failing exchange as JSON lines.
"""

import argparse
import collections
import glob
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hspec  # noqa: E402

JWT_SECRET = hspec.JWT_SECRET
PRE_REQUEST = "test.switch_role"  # SpecHelper.baseCfg's db-pre-request
# SpecHelper.baseCfg's configAppSettings, as Rowgate's db.settings
APP_SETTINGS = {"app.settings.app_host": "localhost",
                "app.settings.external_api_secret": "0123456789abcdef"}
TEST_ROLES = ["postgrest_test_anonymous", "postgrest_test_author", "postgrest_test_default_role",
              "postgrest_test_superuser", "postgrest_test", "postgres"]
PREFIX = "/api"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bindir():
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not dirs:
        sys.exit("no PostgreSQL under /usr/lib/postgresql (install the postgresql package)")
    return dirs[-1]


class Postgres:
    """A throwaway cluster on a free port (run as the postgres user when we are root)."""

    def __init__(self, root):
        self.bin = pg_bindir()
        self.dir = os.path.join(root, "pg")
        os.makedirs(self.dir)
        self.port = free_port()
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if as_user:
            shutil.chown(self.dir, "postgres")
        subprocess.run(as_user + [f"{self.bin}/initdb", "-D", f"{self.dir}/data", "-A", "trust",
                                  "-U", "postgres"], check=True, stdout=subprocess.DEVNULL)
        self.proc = subprocess.Popen(
            as_user + [f"{self.bin}/postgres", "-D", f"{self.dir}/data", "-p", str(self.port),
                       "-k", self.dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                       "-c", "max_connections=200", "-c", "autovacuum=off"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(root, "postgres.log"), "w"))
        for _ in range(200):
            if subprocess.run([f"{self.bin}/pg_isready", "-h", "127.0.0.1", "-p", str(self.port)],
                              stdout=subprocess.DEVNULL).returncode == 0:
                return
            time.sleep(0.05)
        sys.exit("PostgreSQL did not start")

    def psql(self, db, *args, **kw):
        return subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                               "-d", db, *args], **kw)

    def url(self, db):
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def load_fixtures(pg, checkout, root):
    """PostgREST's fixtures into database postgrest_test; returns the statements that failed."""
    tree = os.path.join(root, "fixtures")
    shutil.copytree(os.path.join(checkout, "test", "spec", "fixtures"),
                    os.path.join(tree, "spec", "fixtures"))
    shutil.copy(os.path.join(checkout, "test", "orioledb.sql"), os.path.join(tree, "orioledb.sql"))
    load = os.path.join(tree, "spec", "fixtures", "load.sql")
    text = open(load).read().replace("\\set ON_ERROR_STOP on", "")
    open(load, "w").write(text)
    pg.psql("postgres", "-q", "-c", "CREATE DATABASE postgrest_test", check=True)
    out = pg.psql("postgrest_test", "-q", "-v", "PGUSER=postgres", "-v", "DBNAME=postgrest_test",
                  "-f", load, capture_output=True, text=True, cwd=os.path.dirname(load))
    # the planner's statistics, as PostgREST's own test set-up (nix/tools/withTools.nix) takes
    # them with autovacuum off: `count=planned` answers are estimates from these
    pg.psql("postgrest_test", "-q", "-c", "VACUUM ANALYZE", check=True)
    return [ln for ln in out.stderr.splitlines() if "ERROR" in ln]


def variant_of(config_text):
    """The Rowgate settings a spec's `withConfig baseCfg { … }` asks for (those it has)."""
    settings = {}
    m = re.search(r"configDbAggregates\s*=\s*True", config_text)
    if m:
        settings["aggregates"] = True
    if re.search(r"configDbPlanEnabled\s*=\s*True", config_text):
        settings["plan"] = True
    m = re.search(r"configDbMaxRows\s*=\s*Just\s+(\d+)", config_text)
    if m:
        settings["max_rows"] = int(m.group(1))
    m = re.search(r"configDbSchemas\s*=\s*fromList\s*\[(.*?)\]", config_text)
    if m:
        settings["schemas"] = [hspec.haskell_string(s) for s in re.findall(r'"(?:[^"\\]|\\.)*"', m.group(1))]
    if re.search(r'configDbPreRequest\s*=\s*Just\s*\$\s*QualifiedIdentifier\s+"test"\s+"load_safeupdate"',
                 config_text):
        # (the spec loads pg-safeupdate in a pre-request function: Rowgate's own switch)
        settings["refuse_unfiltered_writes"] = True
        settings["pre_request"] = ""
    if re.search(r"configDbPreparedStatements\s*=\s*False", config_text):
        settings["prepared_statements"] = False
    if re.search(r"configClientErrorVerbosity\s*=\s*Minimal", config_text):
        settings["client_error_verbosity"] = "minimal"
    m = re.search(r"configDbExtraSearchPath\s*=\s*\[(.*?)\]", config_text)
    if m:
        settings["extra_search_path"] = [hspec.haskell_string(s) for s in re.findall(r'"(?:[^"\\]|\\.)*"', m.group(1))]
    m = re.search(r'configJwtAudience\s*=\s*Just\s+("(?:[^"\\]|\\.)*")', config_text)
    if m:
        settings["audience"] = hspec.haskell_string(m.group(1))
    return tuple(sorted((k, json.dumps(v)) for k, v in settings.items()))


class Rowgate:
    """One `rowgate serve --workers 0` on a free port, configured for the spec suite."""

    def __init__(self, binary, pg, root, variant, grants_only=False):
        settings = {k: json.loads(v) for k, v in variant}
        name = "rowgate-" + (re.sub(r"[^a-z0-9]+", "-", str(settings)) if settings else "base")
        self.dir = os.path.join(root, name.strip("-"))
        os.makedirs(self.dir)
        self.port = free_port()
        schemas = ",".join(settings.get("schemas", ["test"]))
        # the fixtures' roles, GRANTs and policies decide (auth.database_roles); with --grants,
        # the figures before them: every test role granted everything, requests run as the
        # connecting user
        grants = "".join(
            f'\n[[grants]]\nrole = "{r}"\ntables = ["*"]\nops = ["select", "insert", "update", "delete"]\n'
            f'functions = ["*"]\n' for r in TEST_ROLES) if grants_only else ""
        config = f"""
listen = "127.0.0.1:{self.port}"
log = "warn"
[db]
url = "{pg.url('postgrest_test')}"
schemas = {json.dumps(schemas)}
extra_search_path = {json.dumps(",".join(settings.get("extra_search_path", [])))}
prepared_statements = {str(settings.get("prepared_statements", True)).lower()}
pre_request = {json.dumps(settings.get("pre_request", PRE_REQUEST))}
schema_poll_ms = 0
[db.settings]
{chr(10).join(f'{json.dumps(k)} = {json.dumps(v)}' for k, v in APP_SETTINGS.items())}
[rest]
prefix = "{PREFIX}"
tx_end = "rollback-allow-override"
aggregates = {str(settings.get("aggregates", False)).lower()}
max_rows = {settings.get("max_rows", 0)}
plan = {str(settings.get("plan", False)).lower()}
server_timing = true
refuse_unfiltered_writes = {str(settings.get("refuse_unfiltered_writes", False)).lower()}
client_error_verbosity = {json.dumps(settings.get("client_error_verbosity", "verbose"))}
[auth]
anon_role = "postgrest_test_anonymous"
database_roles = {"false" if grants_only else "true"}
[[auth.external]]
issuer = ""
secret_file = "jwt.secret"
require_exp = false
audience = {json.dumps(settings.get("audience", ""))}
[ords]
enabled = false
{grants}"""
        open(os.path.join(self.dir, "rowgate.toml"), "w").write(config)
        open(os.path.join(self.dir, "jwt.secret"), "w").write(JWT_SECRET)
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen([binary, "serve", "--config", "rowgate.toml", "--workers", "0"],
                                     cwd=self.dir, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(300):
            if self.proc.poll() is not None:
                sys.exit(f"rowgate exited: see {self.dir}/server.log\n" + open(f"{self.dir}/server.log").read())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        sys.exit("rowgate did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def encode_path(path):
    """The path as bytes on the wire: spaces, `#` (which would end it: Warp's tests take it as
    part of the query string) and non-ASCII percent-encoded, the rest as written."""
    out = []
    for b in path.encode("utf-8"):
        out.append(f"%{b:02X}" if b <= 0x20 or b >= 0x7F or b == 0x23 else chr(b))
    return "".join(out)


def exchange(port, step):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = step["body"] if isinstance(step["body"], bytes) else step["body"].encode("utf-8")
    if not body and step["method"] in ("GET", "HEAD", "DELETE", "OPTIONS"):
        body = None
    # a spec path may lack its leading "/" (`get "tsearch_to_tsvector?…"`): Warp reads it as
    # one, and so does this runner
    path = step["path"] if step["path"].startswith("/") else "/" + step["path"]
    conn.putrequest(step["method"], PREFIX + encode_path(path), skip_accept_encoding=True)
    for name, value in step["headers"]:
        conn.putheader(name, hspec.signed_now(value).encode("utf-8"))
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return (resp.status, resp.reason), resp.getheaders(), data


# the fixtures' relations and functions of PostGIS types: without PostGIS they are not created
POSTGIS_NAMES = {"lines", "shops", "shop_bles", "get_lines", "get_line", "get_shop", "get_shop_bles"}


def needs_postgis(case):
    """Whether a case reads a relation or calls a function the fixtures make of PostGIS types."""
    for step in case.get("steps", []):
        path = step["path"].split("?")[0].strip("/").split("/")
        name = path[1] if path[:1] == ["rpc"] and len(path) > 1 else path[0]
        if name in POSTGIS_NAMES:
            return True
    return False


def json_media(value):
    media, _, params = value.partition(";")
    return media.strip() == "application/json" and params.strip() in ("", "charset=utf-8")


def tolerated(want, got):
    """`got` as the spec's `want` when they differ only as docs/postgrest-differences.md says
    Rowgate differs on purpose: a `hint` or `details` where PostgREST gives none; a query
    string's parse error (`PGRST100`) described in Rowgate's words, not PostgREST's parser's."""
    if isinstance(want, dict) and isinstance(got, dict) and "code" in want and "message" in want:
        if want.get("code") == "PGRST100" and got.get("code") == "PGRST100":
            return want
        for extra in ("hint", "details"):
            if extra in want and want.get(extra) is None and isinstance(got.get(extra), str):
                got = dict(got, **{extra: None})
    return got


MISSING = object()  # what a lens path finds where the JSON has no such key or index


def observed(part, status, headers, data):
    """What a case's `let`/`liftIO` assertion observes of a response (hspec.RESPONSE_PARTS…)."""
    kind = part[0]
    if kind == "status":
        return status
    if kind == "headers":
        return headers
    if kind == "body":
        return data
    if kind == "occurrences":
        return data.decode("utf-8", "replace").count(part[1])
    try:
        value = json.loads(data)
    except ValueError:
        value = MISSING
    if kind == "error_format":
        return isinstance(value, dict) and "message" in value \
            and set(value) <= {"message", "details", "hint", "code"}
    path = [0, "Plan", "Total Cost"] if kind == "cost" else part[1]
    for step in path:
        if isinstance(step, int) and isinstance(value, list) and -len(value) <= step < len(value):
            value = value[step]
        elif isinstance(step, str) and isinstance(value, dict) and step in value:
            value = value[step]
        else:
            value = MISSING
            break
    if kind == "cost":
        # SpecHelper's planCost: a big value when the plan has no total cost
        return value if isinstance(value, (int, float)) else 1e9
    return value


def header_values(headers, name):
    return [v for n, v in headers if n.lower() == name.lower()]


def check_fails(check, status, headers, data, tolerant):
    """Why an assertion of a case's `liftIO` block does not hold, or None (`tolerant`: but
    for the documented differences, as `verdict`)."""
    part, verb, want = check
    if tolerant and verb == "shouldSatisfy" and want[1] == "matchHeader" \
            and want[2].lower() == "content-length" \
            and any(json_media(v) for v in header_values(headers, "Content-Type")):
        return None  # JSON written compactly has a length of its own
    got = observed(part, status, headers, data)
    if verb == "shouldContain":
        missing = [h for h in want[1] if h[1] not in header_values(headers, h[0])]
        return f"headers lack {missing}" if missing else None
    if verb == "shouldSatisfy":
        kind = want[1]
        if kind == ">":
            holds = got > want[2]
        elif kind == "<":
            holds = got < want[2]
        elif kind == "isJust":
            holds = got is not MISSING
        elif kind == "elem":
            holds = want[2][1] in header_values(got, want[2][0])
        elif kind == "matchHeader":
            # hspec's `lookup`: the first header of that name, searched with the regex
            first = header_values(got, want[2])[:1]
            holds = bool(first) and re.search(want[3], first[0]) is not None
        elif kind == "notZeroContentLength":
            holds = header_values(got, "Content-Length")[:1] not in ([], ["0"])
        elif kind == "noBlankHeader":
            holds = ("", "") not in got
        elif kind == "noProfileHeader":
            holds = not header_values(got, "Content-Profile")
        elif kind in ("infix", "not infix"):
            holds = (want[2] in got.decode("utf-8", "replace")) == (kind == "infix")
        elif kind == "prefix":
            holds = got.decode("utf-8", "replace").startswith(want[2])
        else:
            return f"predicate {kind} unknown"
        return None if holds else f"{part[0]} {shown(got)} does not satisfy {want[1:]}"
    # shouldBe
    kind = want[0]
    if kind == "status":
        holds = got[0] == want[1] and (want[2] is None or got[1] == want[2])
    elif kind == "just":
        holds = got is not MISSING and want[1][0] == "json" and got == want[1][1]
    elif kind == "nothing":
        holds = got is MISSING
    elif kind == "json":
        try:
            holds = json.loads(got) == want[1]
        except ValueError:
            holds = False
    elif kind in ("text", "bytes", "empty"):
        expected = b"" if kind == "empty" else want[1] if kind == "bytes" else want[1].encode()
        holds = got == expected
    elif kind in ("number", "bool"):
        holds = got == want[1]
    else:
        return f"value {kind} unknown"
    return None if holds else f"{part[0]} {shown(got)}, expected {shown(want[1:])}"


def shown(value):
    if value is MISSING:
        return "Nothing"
    text = repr(value)
    return text if len(text) < 200 else text[:200] + "…"


def verdict(step, status, headers, data, tolerant=False):
    """What is wrong with a response, or None (`tolerant`: but for the documented differences)."""
    exp = step["expect"]
    problems = [p for p in (check_fails(c, status, headers, data, tolerant)
                            for c in exp.get("checks", [])) if p]
    status = status[0]
    if exp["status"] is not None and status != exp["status"]:
        problems.append(f"status {status}, expected {exp['status']}")
    lower = [(n.lower(), v) for n, v in headers]

    def values(name):
        return [v for n, v in lower if n == name.lower()]

    # a body that matches only through a tolerated difference has another length
    length_differs = False
    if exp["body"] is not None:
        kind, want = exp["body"]
        if kind == "json":
            try:
                got = json.loads(data) if data else None
            except ValueError:
                got = data.decode("utf-8", "replace")
            if tolerant:
                as_sent, got = got, tolerated(want, got)
                length_differs = as_sent != got
            if got != want or (got is None and not data):
                problems.append("body differs")
        else:
            text = data.decode("utf-8", "replace")
            csv = any(v.startswith("text/csv") for v in values("Content-Type"))
            if tolerant and csv and text.endswith("\r\n"):
                # CSV lines end in CRLF, the last one too (RFC 4180), PostgREST's in LF
                text = text[:-2].replace("\r\n", "\n")
                length_differs = True
            if text != want:
                problems.append("body differs")
    if exp["json_type"]:
        ct = values("Content-Type")
        if not ct or not json_media(ct[0]):
            problems.append(f"Content-Type {ct}, expected JSON")
    for m in exp["headers"]:
        if m[0] == "content-type":
            ct = values("Content-Type")
            if ct != [m[1]]:
                problems.append(f"Content-Type {ct}, expected {m[1]!r}")
        elif m[0] == "equals":
            want = m[2]
            if tolerant and m[1].lower() in ("location", "content-location") and want.startswith("/"):
                want = PREFIX + want  # (Content-)Location holds the API's prefix
            if tolerant and length_differs and m[1].lower() == "content-length":
                continue
            # JSON written compactly (PostgreSQL's `json_agg` spaces its arrays): the length of
            # a JSON body is its own
            compact = any(json_media(v) for v in values("Content-Type")) and data
            if tolerant and compact and m[1].lower() == "content-length":
                continue
            if tolerant and m[1].lower() == "proxy-status":
                want = want.replace("PostgREST;", "Rowgate;", 1)  # the server names itself
            if want not in values(m[1]) and m[2] not in values(m[1]):
                problems.append(f"{m[1]} {values(m[1])}, expected {m[2]!r}")
        elif m[0] == "regex":
            # hspec's `matchHeader name regex`: a value the regex finds itself in
            compact = any(json_media(v) for v in values("Content-Type")) and data
            if tolerant and compact and m[1].lower() == "content-length":
                continue
            if not any(re.search(m[2], v) for v in values(m[1])):
                problems.append(f"{m[1]} {values(m[1])}, expected to match {m[2]!r}")
        elif m[0] == "absent":
            if values(m[1]):
                problems.append(f"{m[1]} {values(m[1])}, expected none")
        elif m[0] == "contains":
            if not any(m[2] in v for v in values(m[1])):
                problems.append(f"{m[1]} {values(m[1])}, expected to contain {m[2]!r}")
    return "; ".join(problems) or None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--postgrest", required=True, help="a checkout of PostgREST's repository")
    ap.add_argument("--rowgate", default=os.path.join(os.path.dirname(__file__), "..", "..", "target",
                                                      "debug", "rowgate"))
    ap.add_argument("--only", help="run cases whose file or name matches this regex")
    ap.add_argument("--failures", help="write failing exchanges here (JSON lines)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--grants", action="store_true",
                    help="grant every test role everything instead of switching to the database's "
                         "roles (the figures before auth.database_roles)")
    args = ap.parse_args()

    spec_dir = os.path.join(args.postgrest, "test", "spec", "Feature", "Query")
    cases = []
    paths = glob.glob(os.path.join(spec_dir, "*.hs")) + glob.glob(os.path.join(spec_dir, "*", "*.hs"))
    for path in sorted(paths):
        module = os.path.basename(path)[:-3]
        cases.extend(hspec.read_file(path, module))
    if args.only:
        only = re.compile(args.only)
        cases = [c for c in cases if only.search(c["file"]) or only.search(c["name"])]

    root = tempfile.mkdtemp(prefix="rowgate-pgrst-")
    os.chmod(root, 0o755)
    pg = Postgres(root)
    servers = {}
    failures = open(args.failures, "w") if args.failures else None
    tally = collections.defaultdict(collections.Counter)
    try:
        errors = load_fixtures(pg, args.postgrest, root)
        print(f"fixtures loaded ({len(errors)} statements failed, PostGIS's among them)")
        for case in cases:
            t = tally[case["file"]]
            t["cases"] += 1
            if case.get("pending"):
                t["pending"] += 1
                continue
            if "Geo" in case["name"] or case["file"] == "PostGISSpec" or needs_postgis(case):
                t["postgis"] += 1
                continue
            if "unsupported" in case:
                t["unreadable"] += 1
                continue
            variant = variant_of(case["config"])
            if variant not in servers:
                servers[variant] = Rowgate(os.path.abspath(args.rowgate), pg, root, variant,
                                           grants_only=args.grants)
            port = servers[variant].port
            t["run"] += 1
            strict = True
            answered = []  # each step's response headers, for a later step's path
            for n, step in enumerate(case["steps"]):
                if "path_from" in step:
                    index, header = step["path_from"]
                    found = [v for k, v in answered[index] if k.lower() == header.lower()]
                    # (the runner adds the API's prefix to every path it sends)
                    step = dict(step, path=found[0][len(PREFIX):] if found and found[0].startswith(PREFIX)
                                else (found[0] if found else "/"))
                try:
                    status, headers, data = exchange(port, step)
                    answered.append(headers)
                    problem = verdict(step, status, headers, data, tolerant=True)
                    strict = strict and verdict(step, status, headers, data) is None
                except (OSError, http.client.HTTPException) as e:
                    status, headers, data, problem = (0, ""), [], b"", f"no answer: {e}"
                    answered.append(headers)
                if problem:
                    if failures:
                        failures.write(json.dumps({
                            "file": case["file"], "line": case["line"], "name": case["name"],
                            "step": n, "problem": problem, "method": step["method"],
                            "path": step["path"], "headers": step["headers"], "body": step["body"],
                            "expected": step["expect"], "status": status,
                            "response_headers": headers,
                            "response": data.decode("utf-8", "replace")[:2000],
                        }, ensure_ascii=False, default=lambda v: repr(v)[:200]) + "\n")
                    break
            else:
                t["passed"] += 1
                t["strict"] += strict
    finally:
        for s in servers.values():
            s.stop()
        pg.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print("kept", root)
    total = collections.Counter()
    print("passed: but for the documented differences; strict: byte for byte as PostgREST")
    print(f"{'spec file':28} {'passed':>6} {'strict':>6} {'run':>5} {'cases':>5} {'unread':>6} "
          f"{'pending':>7} {'postgis':>7}")
    for name in sorted(tally):
        t = tally[name]
        total.update(t)
        print(f"{name:28} {t['passed']:6} {t['strict']:6} {t['run']:5} {t['cases']:5} "
              f"{t['unreadable']:6} {t['pending']:7} {t['postgis']:7}")
    pct = 100.0 * total["passed"] / max(total["run"], 1)
    strict = 100.0 * total["strict"] / max(total["run"], 1)
    print(f"{'total':28} {total['passed']:6} {total['strict']:6} {total['run']:5} {total['cases']:5} "
          f"{total['unreadable']:6} {total['pending']:7} {total['postgis']:7}")
    print(f"{pct:.1f}% of the run cases pass ({strict:.1f}% strictly)")


if __name__ == "__main__":
    main()
