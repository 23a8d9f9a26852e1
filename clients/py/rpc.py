"""Functions as RPC through the real postgrest-py client, against the Rowgate at ROWGATE_URL
(its REST prefix included): a scalar by POST and by GET, a set of rows shaped by select, order
and limit, and PostgREST's error for a function that does not exist. Prints one JSON object for
crates/rowgate/tests/clients.rs to check."""
import json

from common import client, outcome

results = {
    "sum": outcome(lambda: client.rpc("add_them", {"a": 1, "b": 2}).execute()),
    "sumGet": outcome(lambda: client.rpc("add_them", {"a": 20, "b": 22}, get=True).execute()),
    "rows": outcome(
        lambda: client.rpc("drivers_above", {"min_points": 200})
        .select("name")
        .order("points", desc=True)
        .limit(2)
        .execute()
    ),
    "missing": outcome(lambda: client.rpc("no_such_function", {}).execute()),
}
print(json.dumps(results))
