//! A PostgreSQL cluster that fails over by itself, for the high-availability test (`ha.rs`):
//! three etcd members and three Patroni members, each Patroni running a PostgreSQL 15 of the
//! installed binaries, all on loopback, from Debian's `etcd-server` and `patroni` packages
//! (installed when missing and the tests run as root, as `.ci/run` does).
//!
//! Patroni's settings are its defaults but for the timings, lowered so that a failover takes
//! seconds, not half a minute: `ttl` 10 s (the leader key outlives a dead leader this long;
//! default 30), `loop_wait` 1 s (default 10), `retry_timeout` 4 s (default 10; `loop_wait` + 2 ×
//! `retry_timeout` ≤ `ttl`, as Patroni asks). `synchronous_mode` is on: a commit waits for a
//! standby, and only that standby may be promoted, so no acknowledged write is lost.
//!
//! Every process runs under a shell that stops it when the test process is gone; the cluster's
//! folder goes with the last of them. A member is "a machine": [`HaCluster::kill_member`] kills
//! its Patroni and its PostgreSQL with SIGKILL, as a power cut would.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::debian_program;
use super::postgres::{bindir, give_to_server_user, shell_as_server_user};

/// One Patroni member.
pub struct Member {
    /// Its name (`m0`…).
    pub name: String,
    /// Its PostgreSQL's port.
    pub pg_port: u16,
    /// Its Patroni REST API's port.
    pub rest_port: u16,
    /// Its folder (configuration, data directory, logs).
    pub dir: PathBuf,
}

/// One etcd member.
pub struct EtcdMember {
    /// Its client port.
    pub client_port: u16,
    /// Its folder.
    pub dir: PathBuf,
}

/// The cluster.
pub struct HaCluster {
    /// Its folder.
    pub base: PathBuf,
    /// The etcd members.
    pub etcd: Vec<EtcdMember>,
    /// The PostgreSQL members.
    pub members: Vec<Member>,
    /// The shells that watch them.
    watchdogs: Vec<std::process::Child>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

/// Runs `command` as the server user under a shell that stops it (SIGINT) once the test
/// process is gone, writing its process id to `pid_file`; the shell.
fn watched(command: &str, pid_file: &Path, log: &Path) -> std::process::Child {
    let script = format!(
        "{command} >>{log} 2>&1 & p=$!; echo $p > {pid}; \
         while [ -d /proc/{parent} ] && kill -0 $p 2>/dev/null; do sleep 0.2; done; \
         kill -INT $p 2>/dev/null; wait $p",
        log = log.display(),
        pid = pid_file.display(),
        parent = std::process::id(),
    );
    shell_as_server_user(&script).expect("a watched process")
}

/// The process id written in `file` (its first line), once it is there.
fn pid_in(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Kills process `pid` and its children with SIGKILL.
fn kill_tree(pid: u32) {
    for args in [vec!["pkill", "-KILL", "-P"], vec!["kill", "-KILL"]] {
        let _ = Command::new(args[0])
            .args(&args[1..])
            .arg(pid.to_string())
            .stderr(Stdio::null())
            .status();
    }
}

/// A GET of `path` on 127.0.0.1:`port` (Patroni's REST API): its status and body.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

impl HaCluster {
    /// Starts etcd and Patroni; returns once a leader and two replicas, one of them the
    /// synchronous standby, are running.
    pub fn start() -> HaCluster {
        let etcd = debian_program(&["/usr/bin/etcd"], "etcd-server");
        let patroni = debian_program(&["/usr/bin/patroni"], "patroni");
        let bin_dir = bindir().expect("PostgreSQL's server binaries under /usr/lib/postgresql");
        let base = std::env::temp_dir().join(format!("rowgate-ha-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).expect("cluster folder");
        // etcd
        let peers: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let clients: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let initial: Vec<String> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("e{i}=http://127.0.0.1:{p}"))
            .collect();
        let etcd_members: Vec<EtcdMember> = (0..3)
            .map(|i| EtcdMember {
                client_port: clients[i],
                dir: base.join(format!("e{i}")),
            })
            .collect();
        let members: Vec<Member> = (0..3)
            .map(|i| Member {
                name: format!("m{i}"),
                pg_port: free_port(),
                rest_port: free_port(),
                dir: base.join(format!("m{i}")),
            })
            .collect();
        for member in &members {
            std::fs::create_dir_all(&member.dir).expect("member folder");
        }
        for member in &etcd_members {
            std::fs::create_dir_all(&member.dir).expect("etcd folder");
        }
        give_to_server_user(&base);
        let mut watchdogs = Vec::new();
        for (i, member) in etcd_members.iter().enumerate() {
            let command = format!(
                "{etcd} --name e{i} --data-dir {dir}/data \
                 --listen-client-urls http://127.0.0.1:{client} \
                 --advertise-client-urls http://127.0.0.1:{client} \
                 --listen-peer-urls http://127.0.0.1:{peer} \
                 --initial-advertise-peer-urls http://127.0.0.1:{peer} \
                 --initial-cluster {initial} --initial-cluster-state new \
                 --initial-cluster-token rowgate-ha-{pid}",
                etcd = etcd.display(),
                dir = member.dir.display(),
                client = member.client_port,
                peer = peers[i],
                initial = initial.join(","),
                pid = std::process::id(),
            );
            watchdogs.push(watched(
                &command,
                &member.dir.join("pid"),
                &member.dir.join("log"),
            ));
        }
        let hosts: Vec<String> = clients.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        for member in &members {
            let dir = member.dir.display();
            let config = format!(
                r#"scope: rowgate-ha
name: {name}
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
etcd3:
  hosts: {hosts}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 200
        wal_keep_size: 256MB
        wal_log_hints: 'on'
        fsync: 'off'
  initdb:
  - encoding: UTF8
  - locale: C
  - auth: trust
  pg_hba:
  - local all all trust
  - host replication all 127.0.0.1/32 trust
  - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {dir}/data
  bin_dir: {bin_dir}
  pgpass: {dir}/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: {dir}
    TimeZone: UTC
"#,
                name = member.name,
                rest = member.rest_port,
                hosts = hosts.join(","),
                pg = member.pg_port,
                bin_dir = bin_dir.display(),
            );
            let file = member.dir.join("patroni.yml");
            std::fs::write(&file, config).expect("patroni.yml");
            give_to_server_user(&member.dir);
            watchdogs.push(watched(
                &format!("{} {}", patroni.display(), file.display()),
                &member.dir.join("pid"),
                &member.dir.join("patroni.log"),
            ));
        }
        let cluster = HaCluster {
            base,
            etcd: etcd_members,
            members,
            watchdogs,
        };
        cluster.wait_for(
            Duration::from_secs(90),
            "a leader and a synchronous standby",
            |c| {
                let roles = c.roles();
                roles.iter().filter(|r| *r == "leader").count() == 1
                    && roles.iter().filter(|r| *r == "sync_standby").count() == 1
                    && roles.len() == 3
            },
        );
        cluster
    }

    /// Waits up to `time` until `done` holds (a panic naming `what` with the members' logs
    /// otherwise).
    pub fn wait_for(&self, time: Duration, what: &str, done: impl Fn(&HaCluster) -> bool) {
        let deadline = Instant::now() + time;
        while !done(self) {
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| {
                        let log =
                            std::fs::read_to_string(m.dir.join("patroni.log")).unwrap_or_default();
                        let tail: Vec<&str> = log.lines().rev().take(15).collect();
                        format!(
                            "{}:\n{}",
                            m.name,
                            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                        )
                    })
                    .collect();
                panic!(
                    "no {what} within {time:?}: {:?}\n{}",
                    self.roles(),
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The cluster as a member that answers sees it: each running member's role (`leader`,
    /// `sync_standby`, `replica`).
    pub fn roles(&self) -> Vec<String> {
        self.view()
            .map(|members| {
                members
                    .iter()
                    .filter(|m| m["state"] == "running" || m["state"] == "streaming")
                    .filter_map(|m| m["role"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The members as Patroni's `GET /cluster` tells them, from the first member that answers.
    fn view(&self) -> Option<Vec<Value>> {
        self.members.iter().find_map(|m| {
            let (status, body) = get(m.rest_port, "/cluster")?;
            (status == 200).then_some(())?;
            let cluster: Value = serde_json::from_str(&body).ok()?;
            cluster["members"].as_array().cloned()
        })
    }

    /// The index of the member that leads now, if any.
    pub fn leader(&self) -> Option<usize> {
        let members = self.view()?;
        let name = members
            .iter()
            .find(|m| m["role"] == "leader" && m["state"] == "running")?["name"]
            .as_str()?
            .to_string();
        self.members.iter().position(|m| m.name == name)
    }

    /// A URL that follows the primary among the members (`target_session_attrs=read-write`).
    pub fn url(&self, db: &str) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.pg_port))
            .collect();
        format!(
            "postgres://postgres@{}/{db}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// Member `i`'s own URL.
    pub fn member_url(&self, i: usize, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{db}",
            self.members[i].pg_port
        )
    }

    /// Runs `sql` on the leader with psql (setup and checks, not the code under test); what it
    /// printed.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let leader = self.leader().expect("a leader");
        super::postgres::psql(self.members[leader].pg_port, db, sql)
    }

    /// Member `i` as a machine losing power: its Patroni and its PostgreSQL killed with
    /// SIGKILL.
    pub fn kill_member(&self, i: usize) {
        let member = &self.members[i];
        let postmaster = pid_in(&member.dir.join("data/postmaster.pid"));
        if let Some(pid) = pid_in(&member.dir.join("pid")) {
            kill_tree(pid);
        }
        if let Some(pid) = postmaster {
            kill_tree(pid);
        }
    }

    /// etcd member `i` killed with SIGKILL.
    pub fn kill_etcd(&self, i: usize) {
        if let Some(pid) = pid_in(&self.etcd[i].dir.join("pid")) {
            kill_tree(pid);
        }
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
        for i in 0..self.etcd.len() {
            self.kill_etcd(i);
        }
        for watchdog in &mut self.watchdogs {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
