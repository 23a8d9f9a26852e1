// A Supabase app through the real supabase-js client, against the Rowgate at ROWGATE_ROOT (no
// prefix: supabase-js adds /rest/v1 and /realtime/v1) with only its URL and keys changed:
// ROWGATE_ANON_KEY (the anonymous role's key) and ROWGATE_SERVICE_KEY (a writer's). Reads with
// filters and embedding, writes, rpc(), and a realtime postgres_changes subscription that
// receives an insert made by another client. Prints one JSON object for
// crates/rowgate/tests/clients.rs to check.
import { createClient } from '@supabase/supabase-js'

const root = process.env.ROWGATE_ROOT
const anon = createClient(root, process.env.ROWGATE_ANON_KEY, { auth: { persistSession: false } })
const service = createClient(root, process.env.ROWGATE_SERVICE_KEY, {
  auth: { persistSession: false },
})
const outcome = ({ data, error, status }) => ({ data, error, status })

const results = {}
results.select = outcome(
  await anon
    .from('team')
    .select('name, driver(name, points)')
    .eq('team_id', 3)
    .order('points', { referencedTable: 'driver', ascending: false })
)
results.anonInsert = outcome(await anon.from('team').insert({ name: 'Nope', points: 0 }))
results.insert = outcome(
  await service.from('team').insert({ team_id: 90, name: 'Rowgate Racing', points: 28 }).select().single()
)
results.update = outcome(
  await service.from('team').update({ points: 30 }).eq('team_id', 90).select('points')
)
results.delete = outcome(await service.from('team').delete().eq('team_id', 90).select('name'))
results.rpc = outcome(await anon.rpc('add_them', { a: 1, b: 2 }))
results.rpcGet = outcome(await anon.rpc('add_them', { a: 20, b: 22 }, { get: true }))
results.rpcRows = outcome(
  await anon
    .rpc('drivers_above', { min_points: 200 })
    .select('name')
    .order('points', { ascending: false })
    .limit(2)
)
results.rpcMissing = outcome(await anon.rpc('no_such_function', {}))

if (process.env.ROWGATE_REALTIME === '1') {
  // subscribe as the anonymous client; insert as the writer once subscribed
  const received = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no postgres_changes event in 10 s')), 10_000)
    const channel = anon
      .channel('teams')
      .on(
        'postgres_changes',
        { event: 'INSERT', schema: 'public', table: 'team', filter: 'points=gt.100' },
        (payload) => {
          clearTimeout(timer)
          resolve(payload)
        }
      )
      .subscribe(async (status, err) => {
        results.subscribeStatus ??= status
        if (status === 'SUBSCRIBED') {
          // a row outside the filter first: it must not arrive
          await service.from('team').insert({ team_id: 91, name: 'Minardi', points: 1 })
          await service.from('team').insert({ team_id: 92, name: 'Brawn', points: 172 })
        } else if (status !== 'CLOSED') {
          clearTimeout(timer)
          reject(new Error(`subscribe: ${status} ${err ?? ''}`))
        }
      })
    results.channelTopic = channel.topic
  })
  try {
    const payload = await received
    results.realtime = {
      eventType: payload.eventType,
      schema: payload.schema,
      table: payload.table,
      new: payload.new,
      old: payload.old,
      hasCommitTimestamp: typeof payload.commit_timestamp === 'string',
    }
  } catch (e) {
    results.realtime = { error: String(e) }
  }
  // presence: a member tracking itself sees itself in the channel's state
  try {
    results.presence = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no presence sync in 10 s')), 10_000)
      const lobby = anon.channel('lobby', { config: { presence: { key: 'me' } } })
      lobby
        .on('presence', { event: 'sync' }, () => {
          const state = lobby.presenceState()
          if (state.me) {
            clearTimeout(timer)
            resolve({ keys: Object.keys(state), online: state.me[0].online })
          }
        })
        .subscribe(async (status) => {
          if (status === 'SUBSCRIBED') {
            results.tracked = await lobby.track({ online: true })
          }
        })
    })
  } catch (e) {
    results.presence = { error: String(e) }
  }
  await anon.removeAllChannels()
}

console.log(JSON.stringify(results))
process.exit(0)
