#!/usr/bin/env python3
"""Fills a running PocketBase with tables of a SQLite file, through its REST API (stdlib only).

    pocketbase_load.py URL SUPERUSER_EMAIL PASSWORD DB TABLE...

Called by bench/peers/start.sh. As the superuser it
- turns request logs off (logs.maxDays = 0: by default every request is written to
  pb_data/auxiliary.db, which halves PocketBase's speed);
- creates one base collection per TABLE, with public list/view rules, one field per column
  (INTEGER -> number with onlyInt, REAL/NUMERIC -> number, anything else -> text) and a unique
  index on the integer primary key column;
- inserts every row. The record id is the row's integer primary key as text ("3"): the
  collection's id field is relaxed to 1-15 chars [a-z0-9] so that /records/3 works; the
  integer itself stays in its own field (team_id, emp_no). NULL text becomes "".
- makes a foreign-key column to a table loaded before it a relation field holding the
  referenced record's id (driver.team_id -> team "3"), so that PocketBase's `expand` embeds
  related records: /api/collections/team/records/3?expand=driver_via_team_id (S14);
- gives each collection the source table's own indexes (people's on last_name, for S7);
- adds a verified person to the built-in `users` auth collection (S17's sign-ins, with the
  same email and password as Rowgate's bench account: SIGN_IN_EMAIL, SIGN_IN_PASSWORD).

A TABLE written `people!` is also writable by anyone (create and delete rules public: S7's
inserts and deletes; Rowgate's need the writer's token) and is loaded straight into
PB_DATA/data.db (environment variable PB_DATA) in one transaction, as PocketBase itself stores
a base collection's records: 1,000,000 records through the API would take many minutes.
"""
import os
import json
import sqlite3
import sys
import urllib.error
import urllib.request

# S17's account: bench/run signs the same person up on Rowgate
SIGN_IN_EMAIL = "bench@example.com"
SIGN_IN_PASSWORD = "bench password 1"


def call(base, method, path, body=None, token=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", token)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as e:
        raise SystemExit(f"{method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')}")
    return json.loads(raw) if raw else None


def field_for(name, decl_type):
    t = (decl_type or "").upper()
    if "INT" in t:
        return {"name": name, "type": "number", "onlyInt": True}
    if any(k in t for k in ("REAL", "FLOA", "DOUB", "NUM", "DEC")):
        return {"name": name, "type": "number"}
    return {"name": name, "type": "text"}


def main():
    if len(sys.argv) < 6:
        raise SystemExit(__doc__)
    base, email, password, db_path, *tables = sys.argv[1:]
    base = base.rstrip("/")
    token = call(base, "POST", "/api/collections/_superusers/auth-with-password",
                 {"identity": email, "password": password})["token"]

    settings = call(base, "PATCH", "/api/settings", {"logs": {"maxDays": 0}}, token)
    if settings["logs"]["maxDays"] != 0:
        raise SystemExit("could not turn PocketBase request logs off")

    call(base, "POST", "/api/collections/users/records", {
        "email": SIGN_IN_EMAIL, "password": SIGN_IN_PASSWORD,
        "passwordConfirm": SIGN_IN_PASSWORD, "verified": True,
    }, token)

    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    collections = {}
    for table in tables:
        direct = table.endswith("!")
        table = table.rstrip("!")
        cols = db.execute(f'PRAGMA table_info("{table}")').fetchall()
        if not cols:
            raise SystemExit(f"no table {table} in {db_path}")
        pks = [c["name"] for c in cols if c["pk"]]
        if len(pks) != 1:
            raise SystemExit(f"{table}: need exactly one primary key column")
        pk = pks[0]
        fields = [{
            "name": "id", "type": "text", "system": True, "primaryKey": True, "required": True,
            "min": 1, "max": 15, "pattern": "^[a-z0-9]+$", "autogeneratePattern": "[a-z0-9]{15}",
        }]
        relations = {fk["from"]: collections[fk["table"]]
                     for fk in db.execute(f'PRAGMA foreign_key_list("{table}")').fetchall()
                     if fk["table"] in collections}
        fields += [
            {"name": c["name"], "type": "relation", "collectionId": relations[c["name"]],
             "maxSelect": 1, "cascadeDelete": False}
            if c["name"] in relations else field_for(c["name"], c["type"])
            for c in cols if c["name"] != "id"
        ]
        indexes = [] if pk == "id" else [f"CREATE UNIQUE INDEX idx_{table}_{pk} ON {table} ({pk})"]
        for index in db.execute(f'PRAGMA index_list("{table}")').fetchall():
            if index["origin"] != "c":
                continue  # a key's own index
            columns = [c["name"] for c in db.execute(f'PRAGMA index_info("{index["name"]}")')]
            unique = "UNIQUE " if index["unique"] else ""
            indexes.append(f"CREATE {unique}INDEX idx_{index['name']} ON {table} ({', '.join(columns)})")
        rules = {"listRule": "", "viewRule": ""}  # "" = public; null would mean superusers only
        if direct:
            rules.update(createRule="", deleteRule="")
        created = call(base, "POST", "/api/collections", {
            "name": table, "type": "base", "fields": fields, **rules, "indexes": indexes,
        }, token)
        collections[table] = created["id"]
        rows = db.execute(f'SELECT * FROM "{table}" ORDER BY "{pk}"')
        if direct:
            n = load_directly(table, fields, rows, pk)
        else:
            n = 0
            for row in rows:
                rec = {k: ("" if row[k] is None else str(row[k]) if k in relations else row[k])
                       for k in row.keys() if k != "id"}
                rec["id"] = str(row[pk])
                call(base, "POST", f"/api/collections/{table}/records", rec, token)
                n += 1
        print(f"pocketbase: {table}: {n} records", file=sys.stderr)


def load_directly(table, fields, rows, pk):
    """Inserts `rows` into the collection's own table in PB_DATA/data.db; NULL becomes "" or 0,
    as PocketBase stores empty fields."""
    pb = sqlite3.connect(os.path.join(os.environ["PB_DATA"], "data.db"), timeout=60)
    names = [f["name"] for f in fields]
    empty = {f["name"]: 0 if f["type"] == "number" else "" for f in fields}
    sql = f'INSERT INTO "{table}" ({", ".join(names)}) VALUES ({", ".join("?" * len(names))})'
    with pb:
        n = pb.executemany(sql, (
            [str(row[pk]) if name == "id" else empty[name] if row[name] is None else row[name]
             for name in names]
            for row in rows)).rowcount
    pb.close()
    return n


if __name__ == "__main__":
    main()
