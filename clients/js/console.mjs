// Drives the console at BASE/_/ in headless Chromium (Debian's, through playwright-core) as an
// administrator would, and prints what it saw as JSON for crates/rowgate/tests/console.rs to
// judge: sign in, watch the dashboard's chart move under load, browse, sort and edit a table,
// add a client (its secret shown once), read the configuration's findings, watch a realtime
// event arrive, filter the access log, and the same pages on a phone. Screenshots go to OUTDIR.
//
// node console.mjs BASE CLIENT_ID CLIENT_SECRET OUTDIR
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const [base, clientId, clientSecret, outDir] = process.argv.slice(2);
mkdirSync(outDir, { recursive: true });
const seen = { pageErrors: [], failedRequests: [] };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});

/** A new tab of its own context (its own sessionStorage), watched for script errors. */
async function open(options) {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  page.on("pageerror", (e) => seen.pageErrors.push(String(e)));
  // (a refused request is logged by the browser too: the page shows those itself)
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) seen.pageErrors.push(m.text());
  });
  page.on("response", (r) => { if (r.status() >= 500) seen.failedRequests.push(`${r.status()} ${r.url()}`); });
  return page;
}

async function signIn(page, secret = clientSecret) {
  await page.goto(`${base}/_/`);
  await page.fill("#client-id", clientId);
  await page.fill("#client-secret", secret);
  await page.click("button[type=submit]");
}

/** Requests to the REST API, `n` of them, a few at a time. */
async function load(n) {
  for (let i = 0; i < n; i += 10) {
    await Promise.all(Array.from({ length: 10 }, () => fetch(`${base}/api/team`).then((r) => r.text())));
  }
}

try {
  // a wrong secret is refused on the page
  const page = await open({ viewport: { width: 1280, height: 800 } });
  await signIn(page, "not-the-secret");
  seen.wrongSecret = await page.textContent("[role=alert]");

  // sign in; the dashboard
  await page.fill("#client-secret", clientSecret);
  await page.click("button[type=submit]");
  seen.who = await page.textContent("[data-testid=who]");
  await page.waitForSelector("[data-testid=chart-rate] polyline");
  const points = () => page.getAttribute("[data-testid=chart-rate] polyline", "points");
  const before = await points();
  // the page reads the statistics every 2 s: load for longer than that
  await Promise.all([load(1500), page.waitForTimeout(2500)]);
  await page.waitForFunction(
    () => parseFloat(document.querySelector("[data-testid=rate]").textContent.replace(/,/g, "")) > 20,
  );
  seen.rate = await page.textContent("[data-testid=rate]");
  seen.p99 = await page.textContent("[data-testid=p99]");
  seen.chartMoved = (await points()) !== before;
  seen.workers = await page.locator("[data-testid=workers] tbody tr").count();
  await page.screenshot({ path: `${outDir}/dashboard.png` });

  // a table: browse, sort, edit
  await page.click("nav a[href='#/data']");
  await page.click("nav.tables a[href='#/data/team']");
  await page.waitForSelector("[data-testid=rows] tbody tr");
  seen.teamRows = await page.locator("[data-testid=rows] tbody tr").count();
  await page.click("[data-testid=rows] th:has-text('points')");
  await page.click("[data-testid=rows] th:has-text('points')");
  await page.waitForSelector("[data-testid=rows] th:has-text('▼')");
  await page.waitForFunction(() => document.querySelector("[data-testid=rows] tbody tr td:nth-child(2)").textContent === "Red Bull");
  seen.firstByPointsDesc = await page.textContent("[data-testid=rows] tbody tr td:nth-child(2)");
  await page.fill("input[aria-label=filter]", "name=eq.Ferrari");
  await page.click("button:has-text('Filter')");
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=rows] tbody tr").length === 1);
  await page.click("[data-testid=rows] tbody tr");
  await page.fill("[data-testid=editor] input[name=points]", "777");
  await page.click("[data-testid=editor] button:has-text('Save')");
  seen.saved = await page.textContent("[data-testid=notice]");
  await page.waitForSelector("[data-testid=rows] td:has-text('777')");
  await page.screenshot({ path: `${outDir}/data.png` });

  // a row inserted, found, and deleted
  await page.click("button:has-text('New row')");
  await page.fill("[data-testid=editor] input[name=name]", "Console Racing");
  await page.fill("[data-testid=editor] input[name=points]", "1");
  await page.click("[data-testid=editor] button:has-text('Insert')");
  await page.waitForSelector("[data-testid=notice]:has-text('Row added.')");
  await page.fill("input[aria-label=filter]", "name=eq.Console Racing");
  await page.click("button:has-text('Filter')");
  await page.waitForSelector("[data-testid=rows] td:has-text('Console Racing')");
  seen.inserted = await page.locator("[data-testid=rows] tbody tr").count();
  await page.click("[data-testid=rows] tbody tr");
  await page.click("[data-testid=editor] button:has-text('Delete')");
  await page.click("[data-testid=editor] button:has-text('Confirm delete')");
  await page.waitForSelector("[data-testid=notice]:has-text('Row deleted.')");
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=rows] tbody tr").length === 0);
  seen.deleted = true;

  // a duality view's document
  await page.click("nav.tables a[href='#/data/team_dv']");
  await page.waitForSelector("[data-testid=rows] th:has-text('document')");
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=rows] tbody tr").length > 1);
  seen.documents = await page.locator("[data-testid=rows] tbody tr").count();

  // a client: added, its secret shown once
  await page.click("nav a[href='#/clients']");
  seen.clientName = `made-in-console-${Date.now()}`;
  await page.fill("input[aria-label=name]", seen.clientName);
  await page.fill("input[aria-label=role]", "writer");
  await page.click("button:has-text('Add client')");
  seen.issuedId = await page.textContent("[data-testid=issued-id]");
  seen.issuedSecret = await page.textContent("[data-testid=issued-secret]");
  await page.waitForSelector(`[data-testid=clients] td:has-text('${seen.clientName}')`);
  await page.screenshot({ path: `${outDir}/clients.png` });
  await page.click("[data-testid=secret] button:has-text('Done')");
  seen.secretGone = (await page.locator("[data-testid=issued-secret]").count()) === 0;

  // people's accounts: one added, found, banned
  await page.click("nav a[href='#/users']");
  await page.fill("input[aria-label=email]", "pat@example.com");
  await page.fill("input[aria-label=password]", "pat's long password");
  await page.click("button:has-text('Add user')");
  await page.waitForSelector("[data-testid=users-notice]:has-text('added')");
  seen.users = { added: await page.textContent("[data-testid=users-notice]") };
  await page.fill("input[aria-label='search by email']", "pat@");
  await page.click("button:has-text('Search')");
  await page.waitForSelector("[data-testid=users] td:has-text('pat@example.com')");
  seen.users.found = await page.locator("[data-testid=users] tbody tr").count();
  await page.click("[data-testid=users] button:has-text('Ban')");
  await page.click("[data-testid=users] button:has-text('Confirm')");
  await page.waitForSelector("[data-testid=users-notice]:has-text('banned')");
  seen.users.banned = await page.textContent("[data-testid=users-notice]");
  await page.waitForSelector("[data-testid=users] .bad");
  seen.users.state = await page.textContent("[data-testid=users] .bad");
  await page.click("[data-testid=users] button:has-text('Sessions')");
  await page.waitForSelector("[data-testid=sessions]");
  seen.users.sessions = await page.locator("[data-testid=sessions] tbody tr").count();
  await page.screenshot({ path: `${outDir}/users.png` });

  // the configuration and config check's findings
  await page.click("nav a[href='#/config']");
  seen.findings = await page.textContent("[data-testid=findings]");
  seen.grantRoles = await page.locator("[data-testid=grants] tbody tr").count();

  // the realtime inspector sees a write made elsewhere
  await page.click("nav a[href='#/realtime']");
  await page.selectOption("select[aria-label=table]", "team");
  await page.click("button:has-text('Subscribe')");
  await page.waitForSelector("[data-testid=feed-state]:has-text('live')");
  const token = await page.evaluate(() => sessionStorage.getItem("rowgate.console.token"));
  const write = await fetch(`${base}/api/team?name=eq.McLaren`, {
    method: "PATCH",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ points: 303 }),
  });
  seen.writeStatus = write.status;
  await page.waitForSelector("[data-testid=events] div:has-text('update')");
  seen.event = await page.textContent("[data-testid=events] div:has-text('update')");
  await page.screenshot({ path: `${outDir}/realtime.png` });

  // the access log, filtered
  await page.click("nav a[href='#/log']");
  await page.waitForSelector("[data-testid=log-lines] div");
  await page.fill("input[aria-label='filter lines']", "/api/team?name=eq.McLaren");
  await page.waitForFunction(() => {
    const lines = [...document.querySelectorAll("[data-testid=log-lines] div")];
    return lines.length > 0 && lines.every((l) => l.textContent.includes("McLaren"));
  });
  seen.logLines = await page.locator("[data-testid=log-lines] div").allTextContents();
  await page.screenshot({ path: `${outDir}/log.png` });

  // a phone: the same pages fit its width
  const phone = await open({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  await signIn(phone);
  await phone.waitForSelector("[data-testid=chart-rate]");
  const overflow = () => phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  seen.phoneOverflow = { dashboard: await overflow() };
  await phone.screenshot({ path: `${outDir}/phone-dashboard.png`, fullPage: true });
  await phone.click("nav a[href='#/data']");
  await phone.click("nav.tables a[href='#/data/driver']");
  await phone.waitForSelector("[data-testid=rows] tbody tr");
  seen.phoneOverflow.data = await overflow();
  await phone.screenshot({ path: `${outDir}/phone-data.png` });
} catch (e) {
  seen.failure = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
