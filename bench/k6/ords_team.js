// The seed's k6 flow (article 003, ORDS AutoREST on TEAM and TEAM_DV): a client-credentials token
// once, then GETs of random team items, each with three checks (status, JSON, the right team).
// Only the host, the schema alias and the client differ from the seed's team.js / team_dv.js.
//
//   k6 run -e ORDS_BASE=http://127.0.0.1:8080/ords/rowgate -e CLIENT_ID=… -e CLIENT_SECRET=… \
//          [-e OBJECT=team_dv] [-e VUS=10] [-e ITERATIONS=1000] bench/k6/ords_team.js
//
// Every check must hold (the checks threshold): k6 exits non-zero otherwise.
import http from 'k6/http';
import { check } from 'k6';
import encoding from 'k6/encoding';

const BASE = __ENV.ORDS_BASE;
const OBJECT = __ENV.OBJECT || 'team';
// a duality view document names its key _id
const ID_FIELD = OBJECT === 'team_dv' ? '_id' : 'team_id';

export const options = {
  scenarios: {
    seed: {
      executor: 'per-vu-iterations',
      vus: Number(__ENV.VUS || 10),
      iterations: Number(__ENV.ITERATIONS || 1000),
    },
  },
  thresholds: { checks: ['rate==1.0'] },
};

export function setup() {
  const basic = encoding.b64encode(`${__ENV.CLIENT_ID}:${__ENV.CLIENT_SECRET}`);
  const res = http.post(`${BASE}/oauth/token`, { grant_type: 'client_credentials' }, {
    headers: { Authorization: `Basic ${basic}` },
  });
  check(res, { 'token issued': (r) => r.status === 200 && r.json('token_type') === 'bearer' });
  return { token: res.json('access_token') };
}

export default function (data) {
  const id = Math.floor(Math.random() * 10) + 1;
  const res = http.get(`${BASE}/${OBJECT}/${id}`, {
    headers: { Authorization: `Bearer ${data.token}` },
  });
  check(res, {
    'status is 200': (r) => r.status === 200,
    'is JSON': (r) => (r.headers['Content-Type'] || '').startsWith('application/json'),
    'the right team': (r) => r.json(ID_FIELD) === id,
  });
}
