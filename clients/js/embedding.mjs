// PostgREST resource embedding through the real postgrest-js client (what supabase-js uses for
// REST), against the Rowgate at ROWGATE_URL (its REST prefix included). Prints one JSON object:
// each call's { data, error, status }, for crates/rowgate/tests/clients.rs to check.
import { PostgrestClient } from '@supabase/postgrest-js'

const client = new PostgrestClient(process.env.ROWGATE_URL)
const outcome = ({ data, error, status }) => ({ data, error, status })

const results = {
  // one-to-many with the embed's own order and filter
  teamWithDrivers: outcome(
    await client
      .from('team')
      .select('name, driver(name, points)')
      .eq('team_id', 3)
      .gt('driver.points', 100)
      .order('points', { referencedTable: 'driver', ascending: false })
  ),
  // many-to-one, aliased, as a single object
  driverWithTeam: outcome(
    await client.from('driver').select('name, crew:team(name)').eq('driver_id', 1).single()
  ),
  // only parents with matching related rows
  inner: outcome(
    await client
      .from('team')
      .select('team_id, driver!inner(name)')
      .gt('driver.points', 400)
  ),
  // a write answering with an embed
  inserted: outcome(
    await client
      .from('driver')
      .insert({ driver_id: 500, name: 'Client Driver', points: 0, team_id: 4 })
      .select('name, team(name)')
  ),
  // no relationship: PostgREST's error
  missing: outcome(await client.from('team').select('name, drivers(name)')),
}
process.stdout.write(JSON.stringify(results))
