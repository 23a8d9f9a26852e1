//! The server's side of a run, read from `/proc/PID`: CPU time (user + system, all threads) and
//! resident memory, summed over the given processes and their children (a supervisor and its
//! workers, nginx's master and its worker); one process's memory and open descriptors (the soak).

use anyhow::{bail, Context};

/// Clock ticks per second of `/proc/PID/stat` times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// A reading of some processes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// CPU seconds used so far (user + system).
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub rss_bytes: u64,
    /// Peak resident set size, bytes.
    pub peak_rss_bytes: u64,
    /// Proportional set size, bytes: each page shared by n processes counted 1/n (a supervisor
    /// and its workers share the binary's pages, which RSS counts in each).
    pub pss_bytes: u64,
}

/// Reads `pids` and their direct children now (a child that exits meanwhile is skipped; the
/// named processes must be there).
pub fn sample(pids: &[u32]) -> anyhow::Result<Sample> {
    let mut total = Sample::default();
    for pid in pids {
        add(&mut total, *pid)
            .with_context(|| format!("reading /proc/{pid} (is the server running?)"))?;
    }
    for pid in children(pids) {
        let mut child = Sample::default();
        if add(&mut child, pid).is_ok() {
            total.cpu_seconds += child.cpu_seconds;
            total.rss_bytes += child.rss_bytes;
            total.peak_rss_bytes += child.peak_rss_bytes;
            total.pss_bytes += child.pss_bytes;
        }
    }
    Ok(total)
}

/// Waits until `pids` (and their children) are quiet: less than `QUIET_SHARE` of a core over
/// one second, so that a step is not measured while another target still works off the last
/// one (a peer that fell minutes behind keeps running the queries its clients gave up on).
/// Processes that are gone count as quiet. Gives how long it waited, or `None` when they were
/// still busy after `limit`.
pub async fn wait_quiet(pids: &[u32], limit: std::time::Duration) -> Option<std::time::Duration> {
    const QUIET_SHARE: f64 = 0.05;
    let started = std::time::Instant::now();
    let cpu = || -> f64 {
        pids.iter()
            .filter_map(|pid| sample(&[*pid]).ok())
            .map(|s| s.cpu_seconds)
            .sum()
    };
    loop {
        let before = cpu();
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        if cpu() - before < QUIET_SHARE {
            return Some(started.elapsed());
        }
        if started.elapsed() >= limit {
            return None;
        }
    }
}

/// Adds one process's CPU time and memory to `total`.
fn add(total: &mut Sample, pid: u32) -> anyhow::Result<()> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces: fields are counted after its ')'.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    if fields.len() < 13 {
        bail!("unexpected /proc/{pid}/stat");
    }
    // utime and stime are fields 14 and 15; after ')' the first field is 3.
    let utime: f64 = fields[11].parse()?;
    let stime: f64 = fields[12].parse()?;
    total.cpu_seconds += (utime + stime) / TICKS_PER_SECOND;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    total.rss_bytes += kib(&status, "VmRSS:") * 1024;
    total.peak_rss_bytes += kib(&status, "VmHWM:") * 1024;
    // (absent on kernels before 4.14: then 0)
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    total.pss_bytes += kib(&rollup, "Pss:") * 1024;
    Ok(())
}

/// CPU seconds one process (not its children) has used so far.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let mut one = Sample::default();
    add(&mut one, pid)?;
    Ok(one.cpu_seconds)
}

/// Resident memory of one process (not its children), bytes.
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(kib(&status, "VmRSS:") * 1024)
}

/// Open file descriptors of one process.
pub fn open_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Processes whose parent is one of `pids`.
pub fn children(pids: &[u32]) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.rsplit_once(')')?.1.to_string();
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                .is_some_and(|ppid| pids.contains(&ppid))
        })
        .collect()
}

fn kib(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let a = sample(&[me]).expect("sample");
        assert!(a.rss_bytes > 0 && a.peak_rss_bytes >= a.rss_bytes);
        assert!(a.pss_bytes > 0 && a.pss_bytes <= a.rss_bytes, "{a:?}");
        let mut x = 0u64;
        let started = std::time::Instant::now();
        while started.elapsed().as_millis() < 100 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let b = sample(&[me]).expect("sample");
        assert!(b.cpu_seconds > a.cpu_seconds, "{a:?} {b:?}");
        assert!(sample(&[u32::MAX]).is_err());
    }

    #[test]
    fn children_are_found() {
        let mut child = std::process::Command::new("sleep")
            .arg("2")
            .spawn()
            .expect("spawn");
        let found = children(&[std::process::id()]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&child.id()), "{found:?}");
        let me = std::process::id();
        assert!(resident_bytes(me).is_some_and(|b| b > 0));
        // standard input, output and error at least
        assert!(open_fds(me).is_some_and(|n| n >= 3));
        assert_eq!(open_fds(u32::MAX), None);
    }
}
