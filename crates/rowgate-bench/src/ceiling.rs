//! The fan-out ceiling of this machine (issue 19, S10): how many frames per second the
//! simplest possible server can write to N loopback sockets, one write per frame per socket,
//! to a minimal client process that only reads. Rowgate's S10 figure is judged against it.
//!
//! `rowgate-bench fanout-ceiling --connections 1000 --events 200 --bytes 200 [--tasks]`:
//! the server side runs here, the clients in one child process (`ceiling-client`, hidden).
//! Without `--tasks`, one loop writes each event's frame to every socket in turn (the
//! ceiling); with it, each socket has its own task, woken through its own channel per event,
//! as Rowgate's sessions are (the cost of a task per connection on top).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What was measured.
pub struct Ceiling {
    /// Frames written (connections × events).
    pub frames: u64,
    /// From the first write until every client had read everything.
    pub elapsed: Duration,
    /// This process's CPU seconds over the same span.
    pub cpu_seconds: f64,
}

/// Runs the server side against a client process of the same binary.
pub async fn run(
    connections: usize,
    events: usize,
    bytes: usize,
    tasks: bool,
) -> anyhow::Result<Ceiling> {
    if connections == 0 || connections > 15_000 || events == 0 || bytes == 0 {
        bail!("connections 1..=15000, events and bytes > 0");
    }
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let total = events * bytes;
    let mut client = tokio::process::Command::new(std::env::current_exe()?)
        .args([
            "ceiling-client",
            &addr.to_string(),
            &connections.to_string(),
            &total.to_string(),
        ])
        .kill_on_drop(true)
        .spawn()
        .context("starting the client process")?;
    let mut sockets = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        sockets.push(socket);
    }
    // a WebSocket text frame of `bytes` bytes in all, as Rowgate's event frames are sent
    let frame = {
        let mut f = vec![0x81u8, 126, 0, 0];
        let payload = bytes.saturating_sub(4);
        f[2..4].copy_from_slice(&u16::try_from(payload).unwrap_or(u16::MAX).to_be_bytes());
        f.resize(bytes, b'x');
        f
    };
    let me = std::process::id();
    let cpu_before = crate::procstat::cpu_seconds(me)?;
    let started = Instant::now();
    let mut done = Vec::with_capacity(connections);
    if tasks {
        let mut senders = Vec::with_capacity(connections);
        for mut socket in sockets {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(events);
            senders.push(tx);
            done.push(tokio::spawn(async move {
                while let Some(frame) = rx.recv().await {
                    socket.write_all(&frame).await?;
                }
                read_everything(socket).await
            }));
        }
        let frame = bytes::Bytes::from(frame);
        for _ in 0..events {
            for tx in &senders {
                tx.send(frame.clone()).await?;
            }
        }
        drop(senders);
    } else {
        for _ in 0..events {
            for socket in &mut sockets {
                socket.write_all(&frame).await?;
            }
        }
        for socket in sockets {
            done.push(tokio::spawn(read_everything(socket)));
        }
    }
    for task in done {
        task.await??;
    }
    let elapsed = started.elapsed();
    let cpu_seconds = crate::procstat::cpu_seconds(me)? - cpu_before;
    let status = client.wait().await?;
    if !status.success() {
        bail!("the client process failed: {status}");
    }
    Ok(Ceiling {
        frames: (connections * events) as u64,
        elapsed,
        cpu_seconds,
    })
}

/// Waits for the client's one byte: it has read every frame.
async fn read_everything(mut socket: TcpStream) -> std::io::Result<()> {
    let mut ack = [0u8; 1];
    socket.read_exact(&mut ack).await.map(|_| ())
}

/// The client process: `connections` sockets to `addr`, each reading `total` bytes, then
/// answering one byte.
pub async fn client(addr: &str, connections: usize, total: usize) -> anyhow::Result<()> {
    let mut readers = Vec::with_capacity(connections);
    for _ in 0..connections {
        let mut socket = TcpStream::connect(addr).await?;
        readers.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            let mut read = 0;
            while read < total {
                let n = socket.read(&mut buf).await?;
                if n == 0 {
                    return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                }
                read += n;
            }
            socket.write_all(b"!").await?;
            Ok::<_, std::io::Error>(())
        }));
    }
    for reader in readers {
        reader.await??;
    }
    Ok(())
}
