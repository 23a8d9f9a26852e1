// A second factor (TOTP) through the real supabase-js client (issue 42), against the Rowgate
// at ROWGATE_ROOT with [accounts] on: enroll (QR code, otpauth:// URI), challenge and verify
// with codes made by the `otpauth` library from the URI (as an authenticator app would), the
// session at aal2 (getAuthenticatorAssuranceLevel, the token's amr) and what only aal2 may
// read (the `vault` table), aal2 kept across a refresh, a code refused the second time, the
// aal rules of enroll and unenroll, and the admin's view of a person's factors. Prints one
// JSON object for crates/rowgate/tests/accounts.rs to check.
import { createClient } from '@supabase/supabase-js'
import * as OTPAuth from 'otpauth'
import { client as clientOf, failure } from './auth_client.mjs'

const root = process.env.ROWGATE_ROOT
const anonKey = process.env.ROWGATE_ANON_KEY
const client = () => clientOf(root, anonKey)
const results = {}

const claims = (session) =>
  JSON.parse(Buffer.from(session.access_token.split('.')[1], 'base64url').toString('utf8'))
const level = async (c) => {
  const { data, error } = await c.auth.mfa.getAuthenticatorAssuranceLevel()
  return {
    error: failure(error),
    current: data?.currentLevel,
    next: data?.nextLevel,
    methods: data?.currentAuthenticationMethods?.map((m) => m.method),
  }
}
const vault = async (c) => (await c.from('vault').select('body')).data?.map((r) => r.body)

const a = client()
const signedUp = await a.auth.signUp({ email: 'carol@example.com', password: 'carol password 1' })
const carol = signedUp.data.user?.id
results.before = { level: await level(a), vault: await vault(a) }

// enroll: the secret, its URI and the QR code (supabase-js makes it a data: URL)
const enrolled = await a.auth.mfa.enroll({ factorType: 'totp', friendlyName: 'phone' })
const factorId = enrolled.data?.id
const totp = OTPAuth.URI.parse(enrolled.data?.totp?.uri ?? 'otpauth://totp/x?secret=AAAA')
results.enroll = {
  error: failure(enrolled.error),
  type: enrolled.data?.type,
  name: enrolled.data?.friendly_name,
  qr: enrolled.data?.totp?.qr_code?.startsWith('data:image/svg+xml;utf-8,<?xml'),
  issuer: totp.issuer,
  label: totp.label,
  secretMatches: totp.secret.base32 === enrolled.data?.totp?.secret,
  period: totp.period,
  digits: totp.digits,
  algorithm: totp.algorithm,
}
results.sameName = failure((await a.auth.mfa.enroll({ factorType: 'totp', friendlyName: 'phone' })).error)
const listed = await a.auth.mfa.listFactors()
results.unverifiedListed = {
  all: listed.data?.all?.map((f) => [f.friendly_name, f.status]),
  totp: listed.data?.totp?.length,
}

// a wrong code, then the right one
const wrongChallenge = await a.auth.mfa.challenge({ factorId })
const now = Date.now()
const code = totp.generate({ timestamp: now })
const wrong = code === '000000' ? '111111' : '000000'
results.wrongCode = failure(
  (await a.auth.mfa.verify({ factorId, challengeId: wrongChallenge.data?.id, code: wrong })).error
)
results.challenge = {
  error: failure(wrongChallenge.error),
  type: wrongChallenge.data?.type,
  expiresIn: wrongChallenge.data && wrongChallenge.data.expires_at - Math.floor(now / 1000),
}
const verified = await a.auth.mfa.challengeAndVerify({ factorId, code })
results.verify = {
  error: failure(verified.error),
  aal: verified.data && claims(verified.data).aal,
  amr: verified.data && claims(verified.data).amr.map((m) => m.method),
}
results.after = { level: await level(a), vault: await vault(a) }

// the same code again, through a new challenge: refused (used once)
results.replay = failure((await a.auth.mfa.challengeAndVerify({ factorId, code })).error)

// a refresh keeps aal2
const refreshed = await a.auth.refreshSession()
results.refreshed = {
  error: failure(refreshed.error),
  aal: refreshed.data.session && claims(refreshed.data.session).aal,
  vault: await vault(a),
}

// a new sign-in is aal1 with aal2 next; from it, no second factor may be added or the
// verified one removed
const b = client()
await b.auth.signInWithPassword({ email: 'carol@example.com', password: 'carol password 1' })
results.secondSignIn = { level: await level(b), vault: await vault(b) }
results.enrollAtAal1 = failure((await b.auth.mfa.enroll({ factorType: 'totp', friendlyName: 'laptop' })).error)
results.unenrollAtAal1 = failure((await b.auth.mfa.unenroll({ factorId })).error)
// the code of the next time step (authenticator apps allow one step of skew)
const next = totp.generate({ timestamp: now + 30_000 })
const raised = await b.auth.mfa.challengeAndVerify({ factorId, code: next })
results.secondVerify = { error: failure(raised.error), level: await level(b) }
results.badChallenge = failure(
  (await b.auth.mfa.verify({ factorId, challengeId: 'nope', code: '123456' })).error
)

// the admin sees the factor and may remove it
const admin = createClient(root, process.env.ROWGATE_SERVICE_KEY, {
  auth: { autoRefreshToken: false, persistSession: false },
}).auth.admin
const adminListed = await admin.mfa.listFactors({ userId: carol })
results.adminList = {
  error: failure(adminListed.error),
  factors: adminListed.data?.factors?.map((f) => [f.id === factorId, f.factor_type, f.status]),
}

// unenroll at aal2: the factor goes and the session falls back to aal1
const removed = await b.auth.mfa.unenroll({ factorId })
results.unenroll = { error: failure(removed.error), id: removed.data?.id === factorId }
await b.auth.refreshSession()
results.afterUnenroll = { level: await level(b), vault: await vault(b) }
const user = await b.auth.getUser()
results.factorsLeft = user.data.user?.factors ?? []

// refusals: no such factor, a factor type not offered
results.unknownFactor = failure(
  (await b.auth.mfa.challenge({ factorId: '00000000-0000-4000-8000-000000000000' })).error
)
results.phone = failure((await b.auth.mfa.enroll({ factorType: 'phone', phone: '+4712345678' })).error)

console.log(JSON.stringify(results))
