"""PostgREST resource embedding through the real postgrest-py client, against the Rowgate at
ROWGATE_URL (its REST prefix included). Prints one JSON object: each call's data, or its
error, for crates/rowgate/tests/clients.rs to check."""
import json

from common import client, outcome

results = {
    # one-to-many, the embed's own filter and order
    "teamWithDrivers": outcome(
        lambda: client.from_("team")
        .select("name, driver(name, points)")
        .eq("team_id", 3)
        .gt("driver.points", 100)
        .order("points", desc=True, foreign_table="driver")
        .execute()
    ),
    # many-to-one under an alias, one object
    "driverWithTeam": outcome(
        lambda: client.from_("driver").select("name, crew:team(name)").eq("driver_id", 1).single().execute()
    ),
    # no relationship: PostgREST's error
    "missing": outcome(lambda: client.from_("team").select("name, drivers(name)").execute()),
}
print(json.dumps(results))
