// What the accounts scripts (supabase_auth.mjs, supabase_auth_email.mjs) share: a supabase-js
// client of its own, as a browser tab (its session in memory, no refresh timer), and an
// error as the tests compare it.
import { createClient } from '@supabase/supabase-js'

export const client = (root, key) => {
  const store = new Map()
  return createClient(root, key, {
    auth: {
      autoRefreshToken: false,
      persistSession: true,
      detectSessionInUrl: false,
      storage: {
        getItem: (k) => store.get(k) ?? null,
        setItem: (k, v) => store.set(k, v),
        removeItem: (k) => store.delete(k),
      },
    },
  })
}

export const failure = (error) =>
  error && { name: error.name, status: error.status, code: error.code, message: error.message, reasons: error.reasons }
