// A Supabase app whose security lives in its database (row-level security with auth.uid(), a
// policy joining a membership table), through the real supabase-js client against the Rowgate
// at ROWGATE_ROOT with auth.database_roles on: users A and B sign their requests with their
// own tokens (ROWGATE_USER_A, ROWGATE_USER_B, as a Supabase session's access token), next to
// the project's anon key (ROWGATE_ANON_KEY) and service-role key (ROWGATE_SERVICE_KEY). REST,
// rpc(), embedding, writes refused by WITH CHECK, and a realtime postgres_changes channel of
// A's that must never receive B's rows. Prints one JSON object for
// crates/rowgate/tests/database_roles.rs to check.
import { createClient } from '@supabase/supabase-js'

const root = process.env.ROWGATE_ROOT
const anonKey = process.env.ROWGATE_ANON_KEY
const options = { auth: { persistSession: false, autoRefreshToken: false } }
const as = (token) =>
  createClient(root, anonKey, {
    ...options,
    global: { headers: { Authorization: `Bearer ${token}` } },
  })
const anon = createClient(root, anonKey, options)
const service = createClient(root, process.env.ROWGATE_SERVICE_KEY, options)
const a = as(process.env.ROWGATE_USER_A)
const b = as(process.env.ROWGATE_USER_B)
const outcome = ({ data, error, status }) => ({ data, error, status })
const ids = async (client) => (await client.from('notes').select('id').order('id')).data?.map((r) => r.id)

const results = {}
results.notes = { a: await ids(a), b: await ids(b), anon: await ids(anon), service: await ids(service) }
results.aUpdate = outcome(
  await a.from('notes').update({ body: 'edited' }).in('id', [1, 3, 4]).select('id')
)
results.aDelete = outcome(await a.from('notes').delete().in('id', [3, 4, 5]).select('id'))
results.aInsert = outcome(
  await a.from('notes').insert({ id: 6, body: "a's new" }).select('id, owner').single()
)
results.aForged = outcome(
  await a.from('notes').insert({ id: 7, owner: process.env.ROWGATE_USER_B_ID, body: 'forged' })
)
results.aRpc = outcome(await a.rpc('visible_notes'))
results.aEmbed = outcome(
  await a
    .from('squads')
    .select('id, notes(id)')
    .order('id')
    .order('id', { referencedTable: 'notes' })
)
results.anonVault = outcome(await anon.from('vault').select('secret'))

// A follows every change to notes; the service role then writes one of B's rows and one of A's
results.realtime = await new Promise((resolve) => {
  const timer = setTimeout(() => resolve({ error: 'no postgres_changes event in 10 s' }), 10_000)
  a.realtime.setAuth(process.env.ROWGATE_USER_A)
  a.channel('notes')
    .on('postgres_changes', { event: '*', schema: 'public', table: 'notes' }, (payload) => {
      clearTimeout(timer)
      // the first event A receives: B's row came first, and must not have
      resolve({ eventType: payload.eventType, id: payload.new?.id, owner: payload.new?.owner })
    })
    .subscribe(async (status, err) => {
      if (status === 'SUBSCRIBED') {
        await service.from('notes').insert({ id: 20, owner: process.env.ROWGATE_USER_B_ID, squad_id: 2, body: "b's" })
        await service.from('notes').insert({ id: 21, owner: process.env.ROWGATE_USER_A_ID, body: "a's" })
      } else if (status !== 'CLOSED') {
        clearTimeout(timer)
        resolve({ error: `subscribe: ${status} ${err ?? ''}` })
      }
    })
})
await a.removeAllChannels()

console.log(JSON.stringify(results))
process.exit(0)
