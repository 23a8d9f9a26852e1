#!/usr/bin/env python3
"""Checks running peers against bench/peers/routes.toml (python3 >= 3.11, stdlib only).

    check_routes.py PEER=PORT...        e.g. check_routes.py nginx=18081 pocketbase=18082

Requests every scenario of each named peer on 127.0.0.1:PORT (s3_team for ids 1..10), checks
status, JSON type, array length, id and name as routes.toml says, and prints one line per
scenario with a sample of the body. Exits 1 if any check failed.
"""
import json
import pathlib
import sys
import tomllib
import urllib.error
import urllib.request

ROUTES = pathlib.Path(__file__).with_name("routes.toml")
TYPES = {"string": str, "array": list, "object": dict}


def pointer(doc, ptr):
    if ptr == "":
        return doc
    for tok in ptr.lstrip("/").split("/"):
        tok = tok.replace("~1", "/").replace("~0", "~")
        doc = doc[int(tok)] if isinstance(doc, list) else doc[tok]
    return doc


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def check(port, spec, team_id=None):
    path = spec["path"].replace("{id}", str(team_id)) if team_id is not None else spec["path"]
    status, body = get(f"http://127.0.0.1:{port}{path}")
    if status != spec.get("status", 200):
        return path, body, f"status {status}"
    doc = json.loads(body)
    if "json_type" in spec and not isinstance(doc, TYPES[spec["json_type"]]):
        return path, body, f"body is not a JSON {spec['json_type']}"
    if "array_len" in spec:
        arr = pointer(doc, spec.get("array_at", ""))
        if not isinstance(arr, list) or len(arr) != spec["array_len"]:
            return path, body, f"array at {spec.get('array_at', '')!r} is not of length {spec['array_len']}"
    if "id_at" in spec:
        got = pointer(doc, spec["id_at"])
        if got != team_id or isinstance(got, bool):
            return path, body, f"{spec['id_at']} = {got!r}, want {team_id}"
    if "name_at" in spec:
        name = pointer(doc, spec["name_at"])
        if not isinstance(name, str) or not name:
            return path, body, f"{spec['name_at']} = {name!r}, want a name"
    return path, body, None


def main():
    routes = tomllib.loads(ROUTES.read_text())
    failed = 0
    for arg in sys.argv[1:] or sys.exit(__doc__):
        peer, port = arg.split("=")
        for scenario, spec in routes[peer].items():
            if spec.get("absent"):
                print(f"{peer}.{scenario}: absent")
                continue
            ids = range(1, 11) if "{id}" in spec["path"] else [None]
            for team_id in ids:
                try:
                    path, body, err = check(port, spec, team_id)
                except Exception as e:  # noqa: BLE001 - report any failure as a failed check
                    path, body, err = spec["path"], b"", repr(e)
                if err:
                    failed += 1
                    print(f"{peer}.{scenario}: FAIL {path}: {err}: {body[:200]!r}")
            sample = body.decode(errors="replace").rstrip()
            sample = sample if len(sample) <= 160 else sample[:160] + f"... ({len(body)} B)"
            if not err:
                print(f"{peer}.{scenario}: ok {path} -> {sample}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
