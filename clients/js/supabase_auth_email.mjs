// Accounts confirmed by email, through the real supabase-js client (issue 42), against the
// Rowgate at ROWGATE_ROOT whose [accounts] send email to a local SMTP sink writing each message
// to ROWGATE_MAILDIR: sign up (no session until confirmed), confirm with the emailed code (once
// only), a magic link followed as a browser would (303 to the app with the session in the
// fragment), a password recovery (PASSWORD_RECOVERY, then a new password), an expired code,
// and the answers that tell no one who has an account. Prints one JSON object for
// crates/rowgate/tests/accounts.rs to check.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { client as clientOf, failure } from './auth_client.mjs'

const root = process.env.ROWGATE_ROOT
const anonKey = process.env.ROWGATE_ANON_KEY
const maildir = process.env.ROWGATE_MAILDIR
const client = () => clientOf(root, anonKey)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// the messages read so far
const seen = new Set()
const decoded = (text) => {
  const [head, ...rest] = text.split(/\r?\n\r?\n/)
  let body = rest.join('\n\n')
  if (/content-transfer-encoding:\s*quoted-printable/i.test(head)) {
    body = body.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_, h) => String.fromCharCode(parseInt(h, 16)))
  } else if (/content-transfer-encoding:\s*base64/i.test(head)) {
    body = Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8')
  }
  return { head, body }
}
// an HTML attribute's text as the browser reads it
const entities = (text) =>
  text
    ?.replace(/&#x([0-9a-f]+);/gi, (_, h) => String.fromCodePoint(parseInt(h, 16)))
    .replace(/&#(\d+);/g, (_, d) => String.fromCodePoint(parseInt(d, 10)))
    .replace(/&quot;/g, '"')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&')
// the next message to `to` (10 s at most): its subject, code and link
const nextMail = async (to) => {
  for (let i = 0; i < 200; i++) {
    for (const name of readdirSync(maildir).filter((n) => n.endsWith('.eml')).sort()) {
      if (seen.has(name)) continue
      const { head, body } = decoded(readFileSync(join(maildir, name), 'utf8'))
      if (!new RegExp(`^To: .*${to.replace('.', '\\.')}`, 'mi').test(head)) continue
      seen.add(name)
      return {
        subject: head.match(/^Subject: (.*)$/m)?.[1]?.trim(),
        code: body.match(/code: (\d{6})/)?.[1],
        link: entities(body.match(/href="([^"]+)"/)?.[1]),
      }
    }
    await sleep(50)
  }
  return null
}
const mailCount = () => readdirSync(maildir).filter((n) => n.endsWith('.eml')).length

const results = {}
const cat = client()
const events = []
cat.auth.onAuthStateChange((event) => events.push(event))

// sign up: a user, no session, and a confirmation email
const signedUp = await cat.auth.signUp({ email: 'cat@example.com', password: 'cat password 1' })
results.signUp = {
  error: failure(signedUp.error),
  session: signedUp.data.session,
  email: signedUp.data.user?.email,
  confirmed: !!signedUp.data.user?.email_confirmed_at,
  identities: signedUp.data.user?.identities?.length,
}
const confirmation = await nextMail('cat@example.com')
results.confirmationMail = {
  subject: confirmation?.subject,
  code: /^\d{6}$/.test(confirmation?.code ?? ''),
  link: /^https:\/\/api\.example\.com\/auth\/v1\/verify\?token=[0-9a-f]{56}&type=signup&redirect_to=/.test(confirmation?.link ?? ''),
}
results.beforeConfirming = failure(
  (await client().auth.signInWithPassword({ email: 'cat@example.com', password: 'cat password 1' })).error
)
const confirmed = await cat.auth.verifyOtp({ email: 'cat@example.com', token: confirmation?.code, type: 'signup' })
results.confirm = {
  error: failure(confirmed.error),
  session: !!confirmed.data.session?.access_token,
  confirmed: !!confirmed.data.user?.email_confirmed_at,
}
results.confirmAgain = failure(
  (await client().auth.verifyOtp({ email: 'cat@example.com', token: confirmation?.code, type: 'signup' })).error
)
results.signIn = failure(
  (await client().auth.signInWithPassword({ email: 'cat@example.com', password: 'cat password 1' })).error
)

// a magic link, followed as a browser follows it
const before = mailCount()
results.otp = failure((await client().auth.signInWithOtp({ email: 'cat@example.com', options: { shouldCreateUser: false } })).error)
const magic = await nextMail('cat@example.com')
results.magicMail = { subject: magic?.subject, code: /^\d{6}$/.test(magic?.code ?? '') }
// (the link names accounts.external_url; it is followed on the server under test)
const local = (link) => `${root}${new URL(link ?? 'http://x/').pathname}${new URL(link ?? 'http://x/').search}`
const followed = await fetch(local(magic?.link), { redirect: 'manual' })
const location = followed.headers.get('location') ?? ''
const fragment = new URLSearchParams(location.split('#')[1] ?? '')
const viaLink = await fetch(`${root}/auth/v1/user`, {
  headers: { apikey: anonKey, Authorization: `Bearer ${fragment.get('access_token')}` },
})
results.magicLink = {
  status: followed.status,
  toApp: location.startsWith('http://app.example.com/welcome#'),
  type: fragment.get('type'),
  tokenType: fragment.get('token_type'),
  refresh: !!fragment.get('refresh_token'),
  user: (await viaLink.json()).email,
}
const again = await fetch(local(magic?.link), { redirect: 'manual' })
const againFragment = new URLSearchParams((again.headers.get('location') ?? '').split('#')[1] ?? '')
results.magicLinkAgain = { status: again.status, error: againFragment.get('error'), code: againFragment.get('error_code') }
results.unknownOtp = failure(
  (await client().auth.signInWithOtp({ email: 'nobody@example.com', options: { shouldCreateUser: false } })).error
)

// a password recovery
const recovering = client()
recovering.auth.onAuthStateChange((event) => events.push(`recovering:${event}`))
results.recover = failure((await recovering.auth.resetPasswordForEmail('cat@example.com')).error)
const recovery = await nextMail('cat@example.com')
results.recoveryMail = { subject: recovery?.subject, code: /^\d{6}$/.test(recovery?.code ?? '') }
const recovered = await recovering.auth.verifyOtp({ email: 'cat@example.com', token: recovery?.code, type: 'recovery' })
results.recovered = { error: failure(recovered.error), session: !!recovered.data.session }
results.newPassword = failure((await recovering.auth.updateUser({ password: 'cat password 2' })).error)
results.signInNew = failure(
  (await client().auth.signInWithPassword({ email: 'cat@example.com', password: 'cat password 2' })).error
)
results.recoverUnknown = failure((await client().auth.resetPasswordForEmail('nobody@example.com')).error)

// a new address, confirmed by the code sent to it
const moving = await recovering.auth.updateUser({ email: 'Kat@example.com' })
results.emailChange = {
  error: failure(moving.error),
  email: moving.data.user?.email,
  newEmail: moving.data.user?.new_email,
}
const change = await nextMail('kat@example.com')
results.changeMail = { subject: change?.subject, code: /^\d{6}$/.test(change?.code ?? '') }
const moved = await recovering.auth.verifyOtp({ email: 'kat@example.com', token: change?.code, type: 'email_change' })
results.moved = { error: failure(moved.error), email: moved.data.user?.email }
results.signInMoved = failure(
  (await client().auth.signInWithPassword({ email: 'kat@example.com', password: 'cat password 2' })).error
)
results.signInOld = failure(
  (await client().auth.signInWithPassword({ email: 'cat@example.com', password: 'cat password 2' })).error
)
await recovering.auth.updateUser({ email: 'cat@example.com' })
const back = await nextMail('cat@example.com')
await recovering.auth.verifyOtp({ email: 'cat@example.com', token: back?.code, type: 'email_change' })

// a sign-up with an address that has a confirmed account: an answer like a new account's, no email
const taken = await client().auth.signUp({ email: 'cat@example.com', password: 'another password 1' })
results.signUpTaken = {
  error: failure(taken.error),
  session: taken.data.session,
  identities: taken.data.user?.identities,
}

// a code past accounts.otp_exp_s
await client().auth.signInWithOtp({ email: 'cat@example.com', options: { shouldCreateUser: false } })
const late = await nextMail('cat@example.com')
await sleep(3000)
results.expired = failure(
  (await client().auth.verifyOtp({ email: 'cat@example.com', token: late?.code, type: 'email' })).error
)
results.mails = { sent: mailCount(), afterMagicLink: mailCount() - before }
results.events = events

console.log(JSON.stringify(results))
