// People's accounts through the real supabase-js client (issue 42), against the Rowgate at
// ROWGATE_ROOT with [accounts] on: sign up, sign in, read only one's own notes (a policy or a
// row filter on the user's id), refresh (TOKEN_REFRESHED), getUser, updateUser (password and
// data), sign out everywhere (the old refresh token then fails), a reused refresh token ending
// its session, the admin API with the service-role key, and GoTrue's refusals (weak password,
// duplicate email, wrong password answered as an unknown email, malformed JSON, oversized
// metadata). Prints one JSON object for crates/rowgate/tests/accounts.rs to check.
import { createClient } from '@supabase/supabase-js'
import { client as clientOf, failure } from './auth_client.mjs'

const root = process.env.ROWGATE_ROOT
const anonKey = process.env.ROWGATE_ANON_KEY
// each person in a client of their own, as in a browser tab
const client = () => clientOf(root, anonKey)

const results = {}
const a = client()
const b = client()
const events = []
a.auth.onAuthStateChange((event) => events.push(event))

// sign up (confirmed at once: no email is sent), then notes of one's own
const signedUp = await a.auth.signUp({
  email: 'Ann@Example.com',
  password: 'ann password 1',
  options: { data: { name: 'Ann' } },
})
results.signUp = {
  error: failure(signedUp.error),
  email: signedUp.data.user?.email,
  name: signedUp.data.user?.user_metadata?.name,
  session: !!signedUp.data.session?.access_token,
  role: signedUp.data.user?.role,
}
const annId = signedUp.data.user?.id
const bob = await b.auth.signUp({ email: 'bob@example.com', password: 'bob password 1' })
const bobId = bob.data.user?.id
results.inserts = [
  (await a.from('notes').insert({ id: 1, owner: annId, body: "ann's" })).status,
  (await b.from('notes').insert({ id: 2, owner: bobId, body: "bob's" })).status,
  (await a.from('notes').insert({ id: 3, owner: bobId, body: 'forged' })).status,
]
const bodies = async (c) => (await c.from('notes').select('body').order('id')).data?.map((r) => r.body)
results.reads = { ann: await bodies(a), bob: await bodies(b) }

// wrong password and unknown email: one answer
const stranger = client()
results.wrongPassword = failure(
  (await stranger.auth.signInWithPassword({ email: 'ann@example.com', password: 'not it' })).error
)
results.unknownEmail = failure(
  (await stranger.auth.signInWithPassword({ email: 'nobody@example.com', password: 'not it' })).error
)

// sign in again, refresh, read the user
const signedIn = await a.auth.signInWithPassword({ email: 'ann@example.com', password: 'ann password 1' })
results.signIn = { error: failure(signedIn.error), session: !!signedIn.data.session }
const firstRefresh = signedIn.data.session?.refresh_token
const refreshed = await a.auth.refreshSession()
results.refresh = {
  error: failure(refreshed.error),
  rotated: !!refreshed.data.session && refreshed.data.session.refresh_token !== firstRefresh,
  sameUser: refreshed.data.user?.id === annId,
}
const got = await a.auth.getUser()
results.getUser = { error: failure(got.error), email: got.data.user?.email }
results.readsAfterRefresh = await bodies(a)

// a refresh token used twice: its session ends (the token that replaced it fails too)
const stolen = await stranger.auth.signInWithPassword({ email: 'bob@example.com', password: 'bob password 1' })
const bobFirst = stolen.data.session.refresh_token
const bobSecond = (await stranger.auth.refreshSession()).data.session?.refresh_token
const raw = async (path, init) => {
  const response = await fetch(`${root}/auth/v1${path}`, {
    ...init,
    headers: { apikey: anonKey, 'Content-Type': 'application/json', ...(init?.headers ?? {}) },
  })
  return { status: response.status, body: await response.json().catch(() => null) }
}
const refreshWith = (token) =>
  raw('/token?grant_type=refresh_token', { method: 'POST', body: JSON.stringify({ refresh_token: token }) })
results.reuse = { replay: await refreshWith(bobFirst), successor: await refreshWith(bobSecond) }

// a new password: the old one stops working; data merges into user_metadata
const updated = await a.auth.updateUser({ password: 'ann password 2', data: { city: 'Oslo' } })
results.updateUser = {
  error: failure(updated.error),
  metadata: updated.data.user?.user_metadata,
}
results.samePassword = failure((await a.auth.updateUser({ password: 'ann password 2' })).error)
results.oldPassword = failure(
  (await stranger.auth.signInWithPassword({ email: 'ann@example.com', password: 'ann password 1' })).error
)
const other = client()
const second = await other.auth.signInWithPassword({ email: 'ann@example.com', password: 'ann password 2' })
results.newPassword = { error: failure(second.error) }
const secondRefresh = second.data.session?.refresh_token

// sign out everywhere: every refresh token of every session fails
const beforeSignOut = (await a.auth.getSession()).data.session?.refresh_token
results.signOut = failure((await a.auth.signOut({ scope: 'global' })).error)
results.afterSignOut = {
  thisSession: await refreshWith(beforeSignOut),
  otherSession: await refreshWith(secondRefresh),
  getUser: failure((await other.auth.getUser()).error),
}
results.events = events

// refusals
results.weak = failure((await client().auth.signUp({ email: 'c@example.com', password: 'short' })).error)
results.duplicate = failure(
  (await client().auth.signUp({ email: 'ANN@example.com', password: 'another long one' })).error
)
results.badEmail = failure((await client().auth.signUp({ email: 'not an email', password: 'long enough 1' })).error)
results.malformed = await raw('/signup', {
  method: 'POST',
  body: '{"email": "d@example.com",',
  headers: { 'X-Supabase-Api-Version': '2024-01-01' },
})
results.oversized = failure(
  (
    await client().auth.signUp({
      email: 'e@example.com',
      password: 'long enough 1',
      options: { data: { blob: 'x'.repeat(20000) } },
    })
  ).error
)

// the admin API with the service-role key
const admin = createClient(root, process.env.ROWGATE_SERVICE_KEY, {
  auth: { autoRefreshToken: false, persistSession: false },
}).auth.admin
const listed = await admin.listUsers({ page: 1, perPage: 1 })
results.adminList = {
  error: failure(listed.error),
  count: listed.data.users?.length,
  total: listed.data.total,
  nextPage: listed.data.nextPage,
}
const made = await admin.createUser({ email: 'made@example.com', password: 'made password 1', email_confirm: true })
results.adminCreate = { error: failure(made.error), email: made.data.user?.email }
const banned = await admin.updateUserById(made.data.user?.id, { ban_duration: '24h' })
results.adminBan = { error: failure(banned.error), banned: !!banned.data.user?.banned_until }
results.bannedSignIn = failure(
  (await client().auth.signInWithPassword({ email: 'made@example.com', password: 'made password 1' })).error
)
results.adminDelete = failure((await admin.deleteUser(made.data.user?.id)).error)
results.notAdmin = failure((await b.auth.admin.listUsers()).error)

console.log(JSON.stringify(results))
