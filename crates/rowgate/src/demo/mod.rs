//! Deterministic demo database generator.
//!
//! [`init`] creates a self-contained SQLite database that exercises the
//! interesting parts of a PostgREST-compatible API:
//!
//! * `employee` — the 42 rows of the classic InterBase `EMPLOYEE` sample
//!   (text, integer and real columns, a nullable column, a `CHECK`).
//! * `team` / `driver` — ten Formula-1-style teams with two drivers each,
//!   linked by a foreign key (for embedding), plus the `team_standings` view.
//! * `posts` — twenty posts of a TreeFrog-style blog index sample, with a JSON
//!   column `meta` (tags, word count, status).
//! * `people` — `N` generated rows for pagination, filtering and bulk tests,
//!   with an index on `last_name` covering every initial `A`–`Z`.
//!
//! Everything is generated from fixed tables and an inline splitmix64 PRNG,
//! so the same `N` always produces byte-identical data. Row `id` of `people`
//! depends only on `id`, never on `N`, so a smaller database is a prefix of
//! a larger one.

pub mod postgres;
pub mod wide;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rusqlite::Connection;

/// Default number of `people` rows.
pub const DEFAULT_PEOPLE: u64 = 1000;

/// The demo configuration (custom resources) that `serve --demo` uses when no config file is
/// given; the README's examples rely on it.
pub const CONFIG: &str = include_str!("../../demo/rowgate.toml");

/// The files the demo configuration names, by their relative paths.
pub const FILES: &[(&str, &str)] = &[(
    "templates/blog.html",
    include_str!("../../demo/templates/blog.html"),
)];

/// What [`init`] created: table name → row count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Every table that was created, in creation order, with its row count.
    pub tables: Vec<(&'static str, u64)>,
}

/// Create (or replace) the demo database at `path`, with `people` rows in `people`, and with
/// `wide` (the large tables' rows) seed 001's 267 other tables ([`wide`]).
///
/// An existing file at `path` (and its `-wal`, `-shm` and `-journal`
/// companions) is deleted first. The data is loaded in a single transaction
/// with journaling and syncing disabled; the finished database is left in
/// `PRAGMA journal_mode=WAL`. All foreign keys are satisfied.
pub fn init(path: &Path, people: u64, wide: Option<u64>) -> anyhow::Result<Summary> {
    let people_i64 = i64::try_from(people).context("people count does not fit in an i64")?;
    crate::db::sqlite::require_folder(path)?;
    remove_existing(path)?;

    let mut conn = Connection::open(path)
        .with_context(|| format!("cannot create database {}", path.display()))?;
    // Fast bulk-load settings; WAL is switched on once the data is in.
    conn.execute_batch(
        "PRAGMA journal_mode=OFF;
         PRAGMA synchronous=OFF;
         PRAGMA foreign_keys=ON;
         PRAGMA cache_size=-262144;
         PRAGMA temp_store=MEMORY;
         PRAGMA threads=2;",
    )
    .context("cannot configure database for loading")?;

    let tx = conn.transaction()?;
    tx.execute_batch(SCHEMA)
        .context("cannot create demo schema")?;
    generate(
        &mut SqliteSink {
            conn: &tx,
            insert: None,
        },
        people_i64,
    )?;
    tx.execute_batch("CREATE INDEX people_last_name ON people(last_name);")
        .context("cannot create people_last_name index")?;
    if let Some(large_rows) = wide {
        tx.execute_batch(&wide::schema())
            .context("cannot create the wide tables")?;
        wide::generate(
            &mut SqliteSink {
                conn: &tx,
                insert: None,
            },
            people_i64,
            large_rows,
        )?;
        tx.execute_batch(&wide::indexes())
            .context("cannot index the wide tables")?;
    }
    tx.commit().context("cannot commit demo data")?;

    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .context("cannot switch database to WAL mode")?;
    anyhow::ensure!(
        mode.eq_ignore_ascii_case("wal"),
        "database refused WAL mode (journal_mode is {mode})"
    );
    conn.execute_batch("PRAGMA synchronous=NORMAL;")?;

    let mut tables = Vec::with_capacity(TABLES.len());
    for &table in TABLES {
        let count: i64 = conn.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
            r.get(0)
        })?;
        tables.push((table, u64::try_from(count)?));
    }
    conn.close()
        .map_err(|(_, e)| e)
        .context("cannot close demo database")?;
    Ok(Summary { tables })
}

/// Every demo row, table by table, into `sink`.
pub(crate) fn generate(sink: &mut dyn RowSink, people: i64) -> anyhow::Result<()> {
    load_employees(sink)?;
    load_teams_and_drivers(sink)?;
    load_posts(sink)?;
    load_people(sink, people)
}

/// One value of a generated row.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cell<'a> {
    Int(i64),
    Real(f64),
    Text(&'a str),
    Null,
}

/// Where generated rows go: INSERTs into SQLite, or COPY text for PostgreSQL.
pub(crate) trait RowSink {
    /// The rows that follow belong to `table`, with these columns.
    fn table(&mut self, table: &str, columns: &[&str]) -> anyhow::Result<()>;
    /// One row.
    fn row(&mut self, cells: &[Cell<'_>]) -> anyhow::Result<()>;
}

impl rusqlite::ToSql for Cell<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match *self {
            Cell::Int(i) => ValueRef::Integer(i),
            Cell::Real(f) => ValueRef::Real(f),
            Cell::Text(t) => ValueRef::Text(t.as_bytes()),
            Cell::Null => ValueRef::Null,
        }))
    }
}

/// Rows as INSERTs on a SQLite connection.
struct SqliteSink<'c> {
    conn: &'c Connection,
    insert: Option<rusqlite::CachedStatement<'c>>,
}

impl RowSink for SqliteSink<'_> {
    fn table(&mut self, table: &str, columns: &[&str]) -> anyhow::Result<()> {
        let holes: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES ({})",
            columns.join(", "),
            holes.join(", ")
        );
        self.insert = Some(self.conn.prepare_cached(&sql)?);
        Ok(())
    }

    fn row(&mut self, cells: &[Cell<'_>]) -> anyhow::Result<()> {
        let stmt = self.insert.as_mut().context("row before table")?;
        stmt.execute(rusqlite::params_from_iter(cells.iter()))?;
        Ok(())
    }
}

/// Table names in creation order (what [`Summary`] reports).
pub(crate) const TABLES: &[&str] = &[
    "employee",
    "team",
    "driver",
    "race",
    "driver_race_map",
    "posts",
    "people",
];

const SCHEMA: &str = "
CREATE TABLE employee (
    emp_no      INTEGER PRIMARY KEY,
    first_name  TEXT NOT NULL,
    last_name   TEXT NOT NULL,
    phone_ext   TEXT,
    hire_date   TEXT NOT NULL,
    dept_no     TEXT NOT NULL,
    job_code    TEXT NOT NULL,
    job_grade   INTEGER NOT NULL,
    job_country TEXT NOT NULL,
    salary      REAL NOT NULL CHECK (salary > 0),
    full_name   TEXT
);
CREATE TABLE team (
    team_id INTEGER PRIMARY KEY,
    name    TEXT NOT NULL UNIQUE,
    points  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE driver (
    driver_id INTEGER PRIMARY KEY,
    name      TEXT NOT NULL UNIQUE,
    points    INTEGER NOT NULL DEFAULT 0,
    team_id   INTEGER REFERENCES team(team_id)
);
CREATE INDEX driver_team_id ON driver(team_id);
CREATE TABLE race (
    race_id   INTEGER PRIMARY KEY,
    name      TEXT NOT NULL UNIQUE,
    laps      INTEGER NOT NULL CHECK (laps > 0),
    race_date DATE,
    podium    JSON
);
CREATE TABLE driver_race_map (
    driver_race_map_id INTEGER PRIMARY KEY,
    race_id            INTEGER NOT NULL REFERENCES race(race_id),
    driver_id          INTEGER NOT NULL REFERENCES driver(driver_id),
    position           INTEGER
);
CREATE INDEX driver_race_map_race_id ON driver_race_map(race_id);
CREATE INDEX driver_race_map_driver_id ON driver_race_map(driver_id);
-- Oracle's car-racing example: a result adds its points to the driver and the driver's team
CREATE TRIGGER driver_race_map_points AFTER INSERT ON driver_race_map
BEGIN
    UPDATE driver SET points = points + (CASE NEW.position
        WHEN 1 THEN 25 WHEN 2 THEN 18 WHEN 3 THEN 15 WHEN 4 THEN 12 WHEN 5 THEN 10
        WHEN 6 THEN 8 WHEN 7 THEN 6 WHEN 8 THEN 4 WHEN 9 THEN 2 WHEN 10 THEN 1 ELSE 0 END)
    WHERE driver_id = NEW.driver_id;
    UPDATE team SET points = points + (CASE NEW.position
        WHEN 1 THEN 25 WHEN 2 THEN 18 WHEN 3 THEN 15 WHEN 4 THEN 12 WHEN 5 THEN 10
        WHEN 6 THEN 8 WHEN 7 THEN 6 WHEN 8 THEN 4 WHEN 9 THEN 2 WHEN 10 THEN 1 ELSE 0 END)
    WHERE team_id = (SELECT team_id FROM driver WHERE driver_id = NEW.driver_id);
END;
CREATE TABLE posts (
    id         INTEGER PRIMARY KEY,
    title      TEXT NOT NULL,
    body       TEXT NOT NULL,
    author     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    meta       JSON
);
CREATE TABLE people (
    id         INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    last_name  TEXT NOT NULL,
    city       TEXT NOT NULL,
    birth_date TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE VIEW team_standings AS
    SELECT t.team_id, t.name, t.points, count(d.driver_id) AS drivers
    FROM team t LEFT JOIN driver d ON d.team_id = t.team_id
    GROUP BY t.team_id;
";

/// Delete `path` and its SQLite companion files, ignoring missing ones.
fn remove_existing(path: &Path) -> anyhow::Result<()> {
    let mut victims = vec![path.to_path_buf()];
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = OsString::from(path.as_os_str());
        name.push(suffix);
        victims.push(PathBuf::from(name));
    }
    for victim in victims {
        match std::fs::remove_file(&victim) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("cannot remove {}", victim.display()));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// employee
// ---------------------------------------------------------------------------

/// One row of the InterBase `EMPLOYEE` sample:
/// (emp_no, first, last, phone_ext, hire_date, dept_no, job_code, job_grade,
/// job_country, salary).
type Employee = (
    i64,
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
    &'static str,
    &'static str,
    i64,
    &'static str,
    f64,
);

#[rustfmt::skip]
const EMPLOYEES: &[Employee] = &[
    (2, "Robert", "Nelson", Some("250"), "1988-12-28", "600", "VP", 2, "USA", 105_900.00),
    (4, "Bruce", "Young", Some("233"), "1988-12-28", "621", "Eng", 2, "USA", 97_500.00),
    (5, "Kim", "Lambert", Some("22"), "1989-02-06", "130", "Eng", 2, "USA", 102_750.00),
    (8, "Leslie", "Johnson", Some("410"), "1989-04-05", "180", "Mktg", 3, "USA", 64_635.00),
    (9, "Phil", "Forest", Some("229"), "1989-04-17", "622", "Mngr", 3, "USA", 75_060.00),
    (11, "K. J.", "Weston", Some("34"), "1990-01-17", "130", "SRep", 4, "USA", 86_292.94),
    (12, "Terri", "Lee", Some("256"), "1990-05-01", "000", "Admin", 4, "USA", 53_793.00),
    (14, "Stewart", "Hall", Some("227"), "1990-06-04", "900", "Finan", 3, "USA", 69_482.63),
    (15, "Katherine", "Young", Some("231"), "1990-06-14", "623", "Mngr", 3, "USA", 67_241.25),
    (20, "Chris", "Papadopoulos", Some("887"), "1990-01-01", "671", "Mngr", 3, "USA", 89_655.00),
    (24, "Pete", "Fisher", Some("888"), "1990-09-12", "671", "Eng", 3, "USA", 81_810.19),
    (28, "Ann", "Bennet", Some("5"), "1991-02-01", "120", "Admin", 5, "England", 22_935.00),
    (29, "Roger", "De Souza", Some("288"), "1991-02-18", "623", "Eng", 3, "USA", 69_482.63),
    (34, "Janet", "Baldwin", Some("2"), "1991-03-21", "110", "Sales", 3, "USA", 61_637.81),
    (36, "Roger", "Reeves", Some("6"), "1991-04-25", "120", "Sales", 3, "England", 33_620.63),
    (37, "Willie", "Stansbury", Some("7"), "1991-04-25", "120", "Eng", 4, "England", 39_224.06),
    (44, "Leslie", "Phong", Some("216"), "1991-06-03", "623", "Eng", 4, "USA", 56_034.38),
    (45, "Ashok", "Ramanathan", Some("209"), "1991-08-01", "621", "Eng", 3, "USA", 80_689.50),
    (46, "Walter", "Steadman", Some("210"), "1991-08-09", "900", "CFO", 1, "USA", 116_100.00),
    (52, "Carol", "Nordstrom", Some("420"), "1991-10-02", "180", "PRel", 4, "USA", 42_742.50),
    (61, "Luke", "Leung", Some("3"), "1992-02-18", "110", "SRep", 4, "USA", 68_805.00),
    (65, "Sue Anne", "O'Brien", Some("877"), "1992-03-23", "670", "Admin", 5, "USA", 31_275.00),
    (71, "Jennifer M.", "Burbank", Some("289"), "1992-04-15", "622", "Eng", 3, "USA", 53_167.50),
    (72, "Claudia", "Sutherland", None, "1992-04-20", "140", "SRep", 4, "Canada", 100_914.00),
    (83, "Dana", "Bishop", Some("290"), "1992-06-01", "621", "Eng", 3, "USA", 62_550.00),
    (85, "Mary S.", "MacDonald", Some("477"), "1992-06-01", "100", "VP", 2, "USA", 111_262.50),
    (94, "Randy", "Williams", Some("892"), "1992-08-08", "672", "Mngr", 4, "USA", 56_295.00),
    (105, "Oliver H.", "Bender", Some("255"), "1992-10-08", "000", "CEO", 1, "USA", 212_850.00),
    (107, "Kevin", "Cook", Some("894"), "1993-02-01", "670", "Dir", 2, "USA", 111_262.50),
    (109, "Kelly", "Brown", Some("202"), "1993-02-04", "600", "Admin", 5, "USA", 27_000.00),
    (110, "Yuki", "Ichida", Some("22"), "1993-02-04", "115", "Eng", 3, "Japan", 6_000_000.00),
    (113, "Mary", "Page", Some("845"), "1993-04-12", "671", "Eng", 4, "USA", 48_000.00),
    (114, "Bill", "Parker", Some("247"), "1993-06-01", "623", "Eng", 5, "USA", 35_000.00),
    (118, "Takashi", "Yamamoto", Some("23"), "1993-07-01", "115", "SRep", 4, "Japan", 7_480_000.00),
    (121, "Roberto", "Ferrari", Some("1"), "1993-07-12", "125", "SRep", 4, "Italy", 99_000_000.00),
    (127, "Michael", "Yanowski", Some("492"), "1993-08-09", "100", "SRep", 4, "USA", 44_000.00),
    (134, "Jacques", "Glon", None, "1993-08-23", "123", "SRep", 4, "France", 390_500.00),
    (136, "Scott", "Johnson", Some("265"), "1993-09-13", "623", "Doc", 3, "USA", 60_000.00),
    (138, "T.J.", "Green", Some("218"), "1993-11-01", "621", "Eng", 4, "USA", 36_000.00),
    (141, "Pierre", "Osborne", None, "1994-01-03", "121", "SRep", 4, "Switzerland", 110_000.00),
    (144, "John", "Montgomery", Some("820"), "1994-03-30", "672", "Eng", 5, "USA", 35_000.00),
    (145, "Mark", "Guckenheimer", Some("221"), "1994-05-02", "622", "Eng", 5, "USA", 32_000.00),
];

fn load_employees(sink: &mut dyn RowSink) -> anyhow::Result<()> {
    sink.table(
        "employee",
        &[
            "emp_no",
            "first_name",
            "last_name",
            "phone_ext",
            "hire_date",
            "dept_no",
            "job_code",
            "job_grade",
            "job_country",
            "salary",
            "full_name",
        ],
    )?;
    for &(emp_no, first, last, ext, hired, dept, job, grade, country, salary) in EMPLOYEES {
        let hire_date = format!("{hired}T00:00:00");
        let full_name = format!("{last}, {first}");
        sink.row(&[
            Cell::Int(emp_no),
            Cell::Text(first),
            Cell::Text(last),
            ext.map_or(Cell::Null, Cell::Text),
            Cell::Text(&hire_date),
            Cell::Text(dept),
            Cell::Text(job),
            Cell::Int(grade),
            Cell::Text(country),
            Cell::Real(salary),
            Cell::Text(&full_name),
        ])
        .with_context(|| format!("cannot insert employee {emp_no}"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// team / driver
// ---------------------------------------------------------------------------

/// Teams in id order (1..=10) with championship points.
const TEAMS: &[(&str, i64)] = &[
    ("Mercedes", 409),
    ("Ferrari", 406),
    ("Red Bull", 860),
    ("McLaren", 302),
    ("Aston Martin", 280),
    ("Alpine", 120),
    ("Williams", 28),
    ("AlphaTauri", 25),
    ("Alfa Romeo", 16),
    ("Haas", 12),
];

/// Drivers in id order (1..=20): name, points, team id.
const DRIVERS: &[(&str, i64, i64)] = &[
    ("Lewis Hamilton", 234, 1),
    ("George Russell", 175, 1),
    ("Charles Leclerc", 206, 2),
    ("Carlos Sainz", 200, 2),
    ("Max Verstappen", 575, 3),
    ("Sergio Perez", 285, 3),
    ("Lando Norris", 205, 4),
    ("Oscar Piastri", 97, 4),
    ("Fernando Alonso", 206, 5),
    ("Lance Stroll", 74, 5),
    ("Pierre Gasly", 62, 6),
    ("Esteban Ocon", 58, 6),
    ("Alexander Albon", 27, 7),
    ("Logan Sargeant", 1, 7),
    ("Yuki Tsunoda", 17, 8),
    ("Daniel Ricciardo", 6, 8),
    ("Valtteri Bottas", 10, 9),
    ("Zhou Guanyu", 6, 9),
    ("Nico Hulkenberg", 9, 10),
    ("Kevin Magnussen", 3, 10),
];

fn load_teams_and_drivers(sink: &mut dyn RowSink) -> anyhow::Result<()> {
    sink.table("team", &["team_id", "name", "points"])?;
    for (id, &(name, points)) in (1_i64..).zip(TEAMS) {
        sink.row(&[Cell::Int(id), Cell::Text(name), Cell::Int(points)])
            .with_context(|| format!("cannot insert team {name}"))?;
    }
    sink.table("driver", &["driver_id", "name", "points", "team_id"])?;
    for (id, &(name, points, team_id)) in (1_i64..).zip(DRIVERS) {
        sink.row(&[
            Cell::Int(id),
            Cell::Text(name),
            Cell::Int(points),
            Cell::Int(team_id),
        ])
        .with_context(|| format!("cannot insert driver {name}"))?;
    }
    sink.table("race", &["race_id", "name", "laps", "race_date", "podium"])?;
    for (id, &(name, laps, date)) in (1_i64..).zip(RACES) {
        sink.row(&[
            Cell::Int(id),
            Cell::Text(name),
            Cell::Int(laps),
            Cell::Text(date),
            Cell::Text("{}"),
        ])
        .with_context(|| format!("cannot insert race {name}"))?;
    }
    Ok(())
}

/// Races in id order (1..=3), from Oracle's car-racing example: name, laps, date. Their results
/// (`driver_race_map`) start empty; each one added moves the points by the trigger.
const RACES: &[(&str, i64, &str)] = &[
    ("Bahrain Grand Prix", 57, "2022-03-20"),
    ("Saudi Arabian Grand Prix", 50, "2022-03-27"),
    ("Australian Grand Prix", 58, "2022-04-09"),
];

// ---------------------------------------------------------------------------
// posts
// ---------------------------------------------------------------------------

const POST_AUTHORS: &[&str] = &["aoyama", "kimura", "sato", "tanaka"];

/// Blog posts in id order (1..=20): title, body and tags (in `meta`, a JSON column).
const POSTS: &[(&str, &str, &[&str])] = &[
    (
        "Hello, TreeFrog",
        "This is the first post of our new blog. It is served straight from a SQLite file.",
        &["sqlite", "treefrog"],
    ),
    (
        "Creating the blog table",
        "We started with a single table holding a title, a body and two timestamps. \
         Everything else is generated from that schema.",
        &["sqlite", "schema"],
    ),
    (
        "Generating a scaffold",
        "The generator produced a controller, a model and four views in seconds. \
         We only had to tweak the index template.",
        &["scaffold", "treefrog"],
    ),
    (
        "Listing posts on the index page",
        "The index page shows every post, newest first. \
         Each row links to a page with the full text.",
        &["views"],
    ),
    (
        "Validating user input",
        "Titles may not be empty and must stay under eighty characters. \
         The form now explains what went wrong instead of failing silently.",
        &["forms", "validation"],
    ),
    (
        "Adding pagination",
        "With more than a handful of posts the index became long. \
         It now shows ten posts per page with links to the next and previous pages.",
        &["paging", "views"],
    ),
    (
        "Optimistic locking",
        "Two people editing the same post used to overwrite each other. \
         A revision counter now rejects the stale update.",
        &["locking", "concurrency"],
    ),
    (
        "Filtering by author",
        "You can now list the posts of a single author. \
         The filter is a plain query parameter, so links can be shared.",
        &["filters", "api"],
    ),
    (
        "Sorting and ordering",
        "Posts can be sorted by title, author or date. \
         Ties are broken by id so the order is always stable.",
        &["order", "api"],
    ),
    (
        "Moving to WAL mode",
        "Readers no longer wait for writers since the database switched to write-ahead logging. \
         Checkpoints run in the background.",
        &["sqlite", "wal"],
    ),
    (
        "A JSON API for the blog",
        "Every page now has a JSON twin. \
         Mobile clients read the same data as the browser.",
        &["json", "api"],
    ),
    (
        "Embedding related rows",
        "A single request can return a post together with its author. \
         Fewer round trips make the page noticeably faster.",
        &["api", "embedding"],
    ),
    (
        "Counting rows cheaply",
        "Exact counts are expensive on large tables. \
         The API can return an estimate when a precise number is not needed.",
        &["counts", "performance"],
    ),
    (
        "Full-text search, first steps",
        "We experimented with searching titles and bodies. \
         Simple pattern matching is enough for a small blog.",
        &["search"],
    ),
    (
        "Caching rendered pages",
        "Pages that did not change are served from a cache. \
         An ETag header lets browsers skip the download entirely.",
        &["cache", "etag", "performance"],
    ),
    (
        "Deploying behind a proxy",
        "The application now runs behind a reverse proxy. \
         Static files are served by the proxy, dynamic pages by the app.",
        &["deployment", "proxy"],
    ),
    (
        "Backups made easy",
        "Backing up the blog means copying one file. \
         The online backup API does it without stopping the server.",
        &["sqlite", "backup"],
    ),
    (
        "Handling time zones",
        "All timestamps are stored in UTC. \
         They are converted to the reader's local time only when displayed.",
        &["time"],
    ),
    (
        "Writing tests for the API",
        "Every endpoint now has a test that runs against a fresh database. \
         The demo generator makes those databases reproducible.",
        &["testing", "api"],
    ),
    (
        "What comes next",
        "Comments, tags and an RSS feed are on the list. \
         Thank you for reading and for all the feedback so far.",
        &["roadmap"],
    ),
];

/// Seed of the `posts` generator ("posts" in ASCII).
const POSTS_SEED: u64 = 0x0070_6f73_7473;

fn load_posts(sink: &mut dyn RowSink) -> anyhow::Result<()> {
    sink.table(
        "posts",
        &[
            "id",
            "title",
            "body",
            "author",
            "created_at",
            "updated_at",
            "meta",
        ],
    )?;
    // First post: Monday 2024-01-08 09:00:00, then one a week at varying hours.
    let first = days_from_civil(2024, 1, 8) * 86_400 + 9 * 3_600;
    let mut created = String::with_capacity(19);
    let mut updated = String::with_capacity(19);
    for (id, &(title, body, tags)) in (1_i64..).zip(POSTS) {
        let mut rng = SplitMix64::for_row(POSTS_SEED, id);
        let author = pick(&mut rng, POST_AUTHORS);
        let created_at = first + (id - 1) * 7 * 86_400 + below(&mut rng, 8 * 3_600);
        // Roughly a third of the posts were edited some time after publication.
        let updated_at = if below(&mut rng, 3) == 0 {
            created_at + 3_600 + below(&mut rng, 5 * 86_400)
        } else {
            created_at
        };
        write_timestamp(&mut created, created_at);
        write_timestamp(&mut updated, updated_at);
        sink.row(&[
            Cell::Int(id),
            Cell::Text(title),
            Cell::Text(body),
            Cell::Text(author),
            Cell::Text(&created),
            Cell::Text(&updated),
            Cell::Text(&post_meta(tags, body, id == POSTS.len() as i64)),
        ])
        .with_context(|| format!("cannot insert post {id}"))?;
    }
    Ok(())
}

/// A post's `meta` (the demo's JSON column, for JSON paths): its tags, the body's word count and
/// its status (the last post is a draft), with the keys in the order PostgreSQL's `jsonb` keeps.
fn post_meta(tags: &[&str], body: &str, draft: bool) -> String {
    let tags: Vec<String> = tags.iter().map(|t| format!("\"{t}\"")).collect();
    format!(
        r#"{{"tags":[{}],"words":{},"status":"{}"}}"#,
        tags.join(","),
        body.split_whitespace().count(),
        if draft { "draft" } else { "published" }
    )
}

// ---------------------------------------------------------------------------
// people
// ---------------------------------------------------------------------------

#[rustfmt::skip]
const FIRST_NAMES: &[&str] = &[
    "Aaron", "Abigail", "Adam", "Adrian", "Aisha", "Alan", "Alice", "Amelia", "Ana", "Andrew",
    "Anna", "Arjun", "Ben", "Beatriz", "Carla", "Carlos", "Charlotte", "Chen", "Chloe",
    "Daniel", "David", "Diana", "Diego", "Dmitri", "Elena", "Eli", "Emily", "Emma", "Ethan",
    "Fatima", "Felix", "Fiona", "Gabriel", "Grace", "Hana", "Hannah", "Harry", "Hassan", "Ines",
    "Isaac", "Isabella", "Ivan", "Jack", "Jacob", "James", "Jana", "Jin", "John", "Julia",
    "Kai", "Karen", "Katarina", "Kenji", "Laura", "Leo", "Liam", "Lily", "Lucas", "Lucia",
    "Maria", "Marco", "Mark", "Maya", "Mei", "Mia", "Michael", "Mohammed", "Nadia", "Noah",
    "Nora", "Olga", "Oliver", "Olivia", "Omar", "Pablo", "Paul", "Priya", "Quentin", "Rachel",
    "Rafael", "Ravi", "Rosa", "Ryan", "Sakura", "Samuel", "Sara", "Sofia", "Sophie", "Thomas",
    "Tom", "Uma", "Valentina", "Victor", "Wei", "William", "Xavier", "Yasmin", "Yusuf", "Zara",
    "Zoe",
];

/// Last names: every initial `A`–`Z` has at least four entries.
#[rustfmt::skip]
const LAST_NAMES: &[&str] = &[
    "Abbott", "Adams", "Ahmed", "Allen", "Alvarez", "Anderson", "Armstrong", "Arnold",
    "Atkinson", "Austin", "Bailey", "Baker", "Barnes", "Bell", "Bennett", "Bishop", "Brooks",
    "Brown", "Burke", "Butler", "Campbell", "Carter", "Castillo", "Chavez", "Chen", "Clark",
    "Collins", "Cook", "Cooper", "Cruz", "Davis", "Dawson", "Day", "Delgado", "Diaz", "Dixon",
    "Duncan", "Dunn", "Eaton", "Edwards", "Ellis", "Emerson", "Erikson", "Estrada", "Evans",
    "Fisher", "Fleming", "Flores", "Ford", "Foster", "Fox", "Franklin", "Fuller", "Garcia",
    "Gomez", "Gonzalez", "Graham", "Gray", "Green", "Griffin", "Gupta", "Gutierrez", "Hall", "Harris",
    "Hayes", "Hernandez", "Hill", "Hoffman", "Howard", "Huang", "Hughes", "Ibrahim", "Ingram",
    "Irwin", "Ito", "Ivanov", "Iverson", "Jackson", "James", "Jenkins", "Jensen", "Jimenez",
    "Johnson", "Jones", "Jordan", "Kelly", "Kennedy", "Khan", "Kim", "King", "Knight",
    "Kowalski", "Kramer", "Lambert", "Larsen", "Lawson", "Lee", "Lewis", "Lin", "Long", "Lopez",
    "Martin", "Martinez", "Mendoza", "Miller", "Mitchell", "Moore", "Morgan", "Murphy", "Myers",
    "Nakamura", "Nash", "Nelson", "Newman", "Nguyen", "Norris", "Novak", "O'Brien", "Ochoa",
    "Okafor", "Oliver", "Olsen", "Ortiz", "Owens", "Palmer", "Parker", "Patel", "Perez",
    "Perry", "Peterson", "Phillips", "Powell", "Price", "Quarles", "Quigley", "Quinn",
    "Quintero", "Qureshi", "Ramirez", "Reed", "Reyes", "Richardson", "Rivera", "Roberts",
    "Robinson", "Rossi", "Russo", "Sanchez", "Schmidt", "Scott", "Silva", "Simmons", "Smith",
    "Stewart", "Stone", "Sullivan", "Tanaka", "Taylor", "Thomas", "Thompson", "Torres", "Tran",
    "Tucker", "Turner", "Ueda", "Underwood", "Upton", "Urban", "Uribe", "Van Dijk", "Vargas",
    "Vasquez", "Vaughn", "Vega", "Volkov", "Wagner", "Walker", "Ward", "Watson", "White",
    "Williams", "Wilson", "Wood", "Wright", "Xavier", "Ximenes", "Xiong", "Xu", "Yamamoto",
    "Yang", "Yates", "Yilmaz", "York", "Young", "Zamora", "Zhang", "Zhou", "Ziegler",
    "Zimmerman", "Zuniga",
];

#[rustfmt::skip]
const CITIES: &[&str] = &[
    "Amsterdam", "Athens", "Auckland", "Bangkok", "Barcelona", "Berlin", "Bogota", "Boston",
    "Brussels", "Budapest", "Buenos Aires", "Cairo", "Cape Town", "Chicago", "Copenhagen",
    "Dublin", "Edinburgh", "Helsinki", "Hong Kong", "Istanbul", "Jakarta", "Johannesburg",
    "Kyoto", "Lagos", "Lima", "Lisbon", "London", "Los Angeles", "Madrid", "Melbourne",
    "Mexico City", "Milan", "Montreal", "Mumbai", "Nairobi", "New York", "Oslo", "Paris", "Prague",
    "Reykjavik", "Rome", "San Francisco", "Santiago", "Sao Paulo", "Seoul", "Singapore",
    "Stockholm", "Sydney", "Tokyo", "Toronto", "Vienna", "Warsaw", "Zurich",
];

/// Seed of the `people` generator ("people" in ASCII).
const PEOPLE_SEED: u64 = 0x7065_6f70_6c65;

fn load_people(sink: &mut dyn RowSink, count: i64) -> anyhow::Result<()> {
    sink.table(
        "people",
        &[
            "id",
            "first_name",
            "last_name",
            "city",
            "birth_date",
            "created_at",
        ],
    )?;
    // Birth dates are spread over 1940-01-01 ..= 2006-12-31.
    let birth_first = days_from_civil(1940, 1, 1);
    let birth_span = days_from_civil(2007, 1, 1) - birth_first;
    // Accounts are created in id order from 2015-01-01 on, about 137 s apart.
    let created_first = days_from_civil(2015, 1, 1) * 86_400;
    const STEP: i64 = 137;

    let mut birth = String::with_capacity(10);
    let mut created = String::with_capacity(19);
    for id in 1..=count {
        let mut rng = SplitMix64::for_row(PEOPLE_SEED, id);
        let first = pick(&mut rng, FIRST_NAMES);
        let last = pick(&mut rng, LAST_NAMES);
        let city = pick(&mut rng, CITIES);
        let (y, m, d) = civil_from_days(birth_first + below(&mut rng, birth_span));
        birth.clear();
        write!(birth, "{y:04}-{m:02}-{d:02}")?;
        write_timestamp(
            &mut created,
            created_first + (id - 1) * STEP + below(&mut rng, STEP),
        );
        sink.row(&[
            Cell::Int(id),
            Cell::Text(first),
            Cell::Text(last),
            Cell::Text(city),
            Cell::Text(&birth),
            Cell::Text(&created),
        ])
        .with_context(|| format!("cannot insert person {id}"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// deterministic helpers
// ---------------------------------------------------------------------------

/// splitmix64 (Steele, Lea & Flood): tiny, fast and fully deterministic.
struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator for row `id` of a table, independent of every other row.
    fn for_row(seed: u64, id: i64) -> Self {
        let mut base = SplitMix64(seed ^ (id as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
        SplitMix64(base.next_u64())
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A number in `0..n` (`n > 0`), by multiply-shift (bias below 2^-40 here).
fn below(rng: &mut SplitMix64, n: i64) -> i64 {
    let n = n.max(1) as u64;
    ((u128::from(rng.next_u64()) * u128::from(n)) >> 64) as i64
}

/// A uniformly chosen element of a non-empty list.
fn pick<'a>(rng: &mut SplitMix64, items: &[&'a str]) -> &'a str {
    let i = below(rng, items.len() as i64) as usize;
    items.get(i).copied().unwrap_or_default()
}

/// Overwrite `out` with `YYYY-MM-DDTHH:MM:SS` for a Unix time in seconds.
fn write_timestamp(out: &mut String, secs: i64) {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    out.clear();
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        s / 3_600,
        s / 60 % 60,
        s % 60
    );
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    type Row = (i64, String, String, String, String, String);

    /// The generator's words are single words or names, without line breaks or padding
    /// ("Mexico City" was once split over two lines of its source, newline and all).
    #[test]
    fn the_generators_words_are_clean() {
        for word in FIRST_NAMES
            .iter()
            .chain(LAST_NAMES)
            .chain(CITIES)
            .chain(POST_AUTHORS)
        {
            assert!(
                !word.contains(['\n', '\r', '\t']) && word.trim() == *word && !word.contains("  "),
                "{word:?}"
            );
        }
        assert!(CITIES.contains(&"Mexico City"));
    }

    fn all_people(path: &Path) -> anyhow::Result<Vec<Row>> {
        let conn = Connection::open(path)?;
        let mut stmt = conn.prepare("SELECT * FROM people ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    #[test]
    fn creates_expected_tables_and_rows() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("demo.db");
        let summary = init(&path, 500, None)?;
        assert_eq!(
            summary.tables,
            vec![
                ("employee", 42),
                ("team", 10),
                ("driver", 20),
                ("race", 3),
                ("driver_race_map", 0),
                ("posts", 20),
                ("people", 500),
            ]
        );

        let conn = Connection::open(&path)?;
        let count =
            |sql: &str| -> anyhow::Result<i64> { Ok(conn.query_row(sql, [], |r| r.get(0))?) };
        assert_eq!(count("SELECT count(*) FROM employee")?, 42);
        assert_eq!(count("SELECT count(*) FROM team")?, 10);
        assert_eq!(count("SELECT count(*) FROM driver")?, 20);
        assert_eq!(count("SELECT count(*) FROM posts")?, 20);
        assert_eq!(count("SELECT count(*) FROM people")?, 500);
        assert_eq!(count("SELECT min(id) * 1000 + max(id) FROM people")?, 1_500);
        assert_eq!(
            count("SELECT count(*) FROM team_standings WHERE drivers = 2")?,
            10
        );
        assert!(count("SELECT count(*) FROM employee WHERE salary > 100000")? >= 5);
        assert_eq!(
            count(
                "SELECT count(*) FROM employee WHERE full_name = last_name || ', ' || first_name"
            )?,
            42
        );
        assert_eq!(
            count("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN ('people_last_name', 'driver_team_id')")?,
            2
        );

        let nelson: (String, String, f64) = conn.query_row(
            "SELECT full_name, hire_date, salary FROM employee WHERE emp_no = 2",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        assert_eq!(
            nelson,
            (
                "Nelson, Robert".to_owned(),
                "1988-12-28T00:00:00".to_owned(),
                105_900.0
            )
        );
        Ok(())
    }

    #[test]
    fn every_initial_occurs_in_last_names() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("demo.db");
        init(&path, 500, None)?;
        let conn = Connection::open(&path)?;
        let mut stmt = conn.prepare("SELECT DISTINCT substr(last_name, 1, 1) FROM people")?;
        let initials: BTreeSet<String> = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let expected: BTreeSet<String> = ('A'..='Z').map(String::from).collect();
        assert_eq!(initials, expected);
        Ok(())
    }

    #[test]
    fn is_deterministic_and_replaces_existing_file() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let a = dir.path().join("a.db");
        let b = dir.path().join("b.db");
        init(&a, 500, None)?;
        init(&b, 500, None)?;
        let first = all_people(&a)?;
        assert_eq!(first.len(), 500);
        assert_eq!(first, all_people(&b)?);

        // Re-initialising over an existing file replaces it.
        init(&a, 300, None)?;
        let again = all_people(&a)?;
        assert_eq!(again.len(), 300);
        // A smaller database is a prefix of a larger one.
        assert_eq!(again[..], first[..300]);

        // Dates are well-formed.
        for (_, _, _, _, birth, created) in &first {
            assert_eq!(birth.len(), 10, "{birth}");
            assert_eq!(created.len(), 19, "{created}");
            assert_eq!(&created[10..11], "T");
        }
        Ok(())
    }

    #[test]
    fn foreign_keys_hold_and_wal_is_on() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("demo.db");
        init(&path, 500, None)?;
        let conn = Connection::open(&path)?;
        conn.execute_batch("PRAGMA foreign_keys=ON")?;
        let mut stmt = conn.prepare("PRAGMA foreign_key_check")?;
        let violations = stmt.query_map([], |r| r.get::<_, String>(0))?.count();
        assert_eq!(violations, 0);
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        assert_eq!(mode, "wal");
        let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        assert_eq!(ok, "ok");
        Ok(())
    }

    #[test]
    fn zero_people_is_fine() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("empty.db");
        let summary = init(&path, 0, None)?;
        assert!(summary.tables.contains(&("people", 0)));
        Ok(())
    }

    #[test]
    fn calendar_round_trips() {
        for day in [-800_000, -1, 0, 1, 11_016, 19_723, 20_000, 2_932_896] {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(
            days_from_civil(2024, 2, 29) + 1,
            days_from_civil(2024, 3, 1)
        );
        let mut s = String::new();
        write_timestamp(&mut s, 599_270_400);
        assert_eq!(s, "1988-12-28T00:00:00");
    }
}
