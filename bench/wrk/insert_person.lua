-- wrk script: POST one new row to /api/people (S11, durable single-row insert).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Prefer"] = "return=minimal"
wrk.body = '{"first_name":"Ada","last_name":"Lovelace","city":"London","birth_date":"1815-12-10","created_at":"2026-11-22T00:00:00Z"}'
wrk.path = "/api/people"
