"""Writes through the real postgrest-py client with a service-role key (ROWGATE_SERVICE_KEY, a
long-lived token from `rowgate clients key`), against the Rowgate at ROWGATE_URL: an insert
returning its row, an update and a delete by filter returning what they changed, an upsert,
and the anonymous role refused. Prints one JSON object for crates/rowgate/tests/clients.rs to
check."""
import json
import os

from common import client, outcome
from postgrest import SyncPostgrestClient

service = SyncPostgrestClient(os.environ["ROWGATE_URL"]).auth(os.environ["ROWGATE_SERVICE_KEY"])

results = {
    "anonInsert": outcome(lambda: client.from_("team").insert({"name": "Nope", "points": 0}).execute()),
    "insert": outcome(
        lambda: service.from_("team").insert({"team_id": 80, "name": "Py Racing", "points": 3}).execute()
    ),
    "update": outcome(lambda: service.from_("team").update({"points": 4}).eq("team_id", 80).execute()),
    "upsert": outcome(
        lambda: service.from_("team")
        .upsert({"team_id": 80, "name": "Py Racing", "points": 5}, on_conflict="team_id")
        .execute()
    ),
    "delete": outcome(lambda: service.from_("team").delete().eq("team_id", 80).execute()),
    "after": outcome(lambda: service.from_("team").select("team_id").eq("team_id", 80).execute()),
}
print(json.dumps(results))
