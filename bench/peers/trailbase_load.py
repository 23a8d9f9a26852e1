#!/usr/bin/env python3
"""Lays out a TrailBase depot serving tables of a SQLite file, then fills them (stdlib only).

    trailbase_load.py layout DB DEPOT TABLE...   before TrailBase starts
    trailbase_load.py fill DB DEPOT TABLE...     once it answers

Called by bench/peers/start.sh. `layout` writes DEPOT/migrations/main/U<seconds>__bench.sql, which
TrailBase applies at start: each TABLE as a STRICT table with the same columns, keys and
foreign keys (TrailBase serves only STRICT tables with an INTEGER or UUID primary key), and
DEPOT/config.textproto with a record API per table: readable by anyone, `people` creatable by
anyone too (S11), `driver` expanding its team (S14t). `fill` copies the rows straight into
DEPOT/data/main.db in one transaction per table (1,000,000 people through the API would take
minutes).
"""
import os
import sqlite3
import sys
import time

# TrailBase's STRICT tables take only these column types
STRICT_TYPES = ("INTEGER", "REAL", "TEXT", "BLOB", "ANY")


def strict_type(declared):
    t = (declared or "").upper()
    if "INT" in t:
        return "INTEGER"
    if any(k in t for k in ("REAL", "FLOA", "DOUB", "NUM", "DEC")):
        return "REAL"
    if "BLOB" in t:
        return "BLOB"
    return "TEXT" if t else "ANY"


def create_table(db, table):
    cols = db.execute(f'PRAGMA table_info("{table}")').fetchall()
    if not cols:
        raise SystemExit(f"no table {table}")
    fks = {fk[3]: (fk[2], fk[4]) for fk in db.execute(f'PRAGMA foreign_key_list("{table}")')}
    parts = []
    for _, name, declared, notnull, default, pk in cols:
        part = f'"{name}" {strict_type(declared)}'
        if pk:
            part += " PRIMARY KEY"
        if notnull:
            part += " NOT NULL"
        if default is not None:
            part += f" DEFAULT {default}"
        if name in fks:
            part += f' REFERENCES "{fks[name][0]}"("{fks[name][1]}")'
        parts.append(part)
    return f'CREATE TABLE "{table}" ({", ".join(parts)}) STRICT;'


def record_api(table, fks):
    acl = "[CREATE, READ]" if table == "people" else "[READ]"
    expand = f" expand: [{', '.join(repr(c).replace(chr(39), chr(34)) for c in fks)}]" if fks else ""
    return f'{{ name: "{table}" table_name: "{table}" acl_world: {acl}{expand} }}'


def layout(db, depot, tables):
    os.makedirs(os.path.join(depot, "migrations", "main"), exist_ok=True)
    sql = "\n".join(create_table(db, t) for t in tables)
    # (a migration's version is a 32-bit integer: seconds since the epoch, as its docs do)
    stamp = int(time.time())
    with open(os.path.join(depot, "migrations", "main", f"U{stamp}__bench.sql"), "w") as f:
        f.write(sql + "\n")
    apis = []
    for t in tables:
        fks = [fk[3] for fk in db.execute(f'PRAGMA foreign_key_list("{t}")') if fk[2] in tables]
        apis.append(record_api(t, fks))
    with open(os.path.join(depot, "config.textproto"), "w") as f:
        f.write("email {}\nserver { application_name: \"rowgate-bench\" }\nauth {}\njobs {}\n")
        f.write("record_apis: [\n  " + ",\n  ".join(apis) + "\n]\n")


def fill(db, depot, tables):
    target = sqlite3.connect(os.path.join(depot, "data", "main.db"), timeout=60)
    for t in tables:
        cols = [c[1] for c in db.execute(f'PRAGMA table_info("{t}")')]
        names = ", ".join(f'"{c}"' for c in cols)
        rows = db.execute(f'SELECT {names} FROM "{t}"')
        with target:
            n = target.executemany(
                f'INSERT INTO "{t}" ({names}) VALUES ({", ".join("?" * len(cols))})', rows
            ).rowcount
        print(f"trailbase: {t}: {n} rows", file=sys.stderr)
    target.close()


def main():
    if len(sys.argv) < 5 or sys.argv[1] not in ("layout", "fill"):
        raise SystemExit(__doc__)
    step, db_path, depot, *tables = sys.argv[1:]
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    (layout if step == "layout" else fill)(db, depot, tables)


if __name__ == "__main__":
    main()
