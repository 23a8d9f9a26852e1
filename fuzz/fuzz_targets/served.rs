//! The demo app, served once per fuzzing process to the targets that send it requests: the demo
//! database (200 people) in a folder of its own on `/dev/shm` when there is one (writes commit
//! with fsync: memory keeps that cheap), the demo configuration with every table, operation and
//! function granted to the anonymous role (so that inputs reach the planner, not a 401), on a
//! two-thread runtime with its background tasks (realtime, client polling) running.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rowgate::app::App;
use rowgate::config::{GrantConfig, Layer};

/// The runtime and the app.
pub struct Served {
    pub runtime: tokio::runtime::Runtime,
    pub app: Arc<App>,
}

/// The app of this process, started on first use.
pub fn served(target: &str) -> &'static Served {
    static SERVED: OnceLock<Served> = OnceLock::new();
    SERVED.get_or_init(|| start(target))
}

fn start(target: &str) -> Served {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("rowgate-fuzz-{target}"));
    std::fs::create_dir_all(&dir).expect("fuzz folder");
    let db = dir.join("demo.db");
    rowgate::demo::init(&db, 200, None).expect("demo database");
    let overrides = [
        ("db.path", db.display().to_string()),
        (
            "auth.secret_file",
            dir.join("rowgate.secret").display().to_string(),
        ),
    ];
    let overrides: Vec<(&str, String)> = overrides.iter().map(|(k, v)| (*k, v.clone())).collect();
    let layer = Layer::Embedded {
        text: rowgate::demo::CONFIG,
        files: rowgate::demo::FILES,
    };
    let mut config = rowgate::config::load(layer, |_| None, &overrides).expect("demo config");
    config.grants = vec![GrantConfig {
        role: "anon".into(),
        tables: vec!["*".into()],
        ops: ["select", "insert", "update", "delete"]
            .map(String::from)
            .to_vec(),
        read_columns: None,
        write_columns: None,
        filter: None,
        functions: vec!["*".into()],
    }];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let app = runtime
        .block_on(rowgate::cli::start(config))
        .expect("the demo app starts");
    Served { runtime, app }
}

/// Whether `body` is a JSON error envelope: an object with a string `code` and `message`, or,
/// from the token endpoints, RFC 6749's object with a string `error`.
pub fn is_error_envelope(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| {
        (v["code"].is_string() && v["message"].is_string()) || v["error"].is_string()
    })
}
