//! npud's memory on a full node (issue 59): eight devices with every stream booked, held
//! by a thousand native holders, as a node's interposed processes hold them.
//!
//! The holders are budget-wire connections, each its own holder in npud, spread over a few
//! helper processes (`npud-bench --wire-holders`), so no process needs a thousand
//! descriptors and npud sees several peers, as on a node.

use super::scale::rss_kib;
use crate::Daemon;
use crate::wire::Wire;
use npud_proto::v1::{self as pb, budget_reply::Reply};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// Helper processes the holders are spread over.
const HELPERS: usize = 4;

/// What [`node_memory`] measured.
#[derive(Debug, Clone)]
pub struct NodeMemory {
    pub devices: u32,
    pub holders: usize,
    /// Streams booked on all devices together.
    pub booked: u64,
    /// npud's resident memory once started, and with everything booked.
    pub rss_idle_kib: u64,
    pub rss_full_kib: u64,
}

/// The `--wire-holders SOCKET SPEC` mode: one connection per `device:count` of the comma-
/// separated SPEC, each says hello and is granted its count at once; prints `ready N` (N
/// granted in all) and holds until its input closes.
pub fn hold(socket: &Path, spec: &str) -> anyhow::Result<()> {
    let mut held = Vec::new();
    let mut granted = 0u64;
    for entry in spec.split(',').filter(|e| !e.is_empty()) {
        let (device, count) = entry.split_once(':').ok_or_else(|| anyhow::anyhow!("{entry:?} is not device:count"))?;
        let (device, count): (u32, u32) = (device.parse()?, count.parse()?);
        let hello = pb::BudgetHello { program: "npud-bench-holder".into(), ..Default::default() };
        let mut wire = Wire::hello(socket, hello);
        match wire.acquire(device, count, 0) {
            Ok(Reply::Acquired(_)) => granted += u64::from(count),
            other => anyhow::bail!("{count} streams on device {device}: {other:?}"),
        }
        held.push(wire);
    }
    println!("ready {granted}");
    std::io::stdout().flush()?;
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    Ok(())
}

/// Books every stream of `d`'s `devices` (each device's capacity) over `holders` holders,
/// spread evenly, and reads npud's resident memory before and after.
pub fn node_memory(d: &Daemon, devices: u32, holders: usize) -> anyhow::Result<NodeMemory> {
    let capacity = d.device0()["capacity"].as_u64().unwrap_or(0);
    // Holder i books on device i % devices; a device's capacity split over its holders.
    let per_device = holders.div_ceil(devices as usize) as u64;
    let share = |j: u64| capacity / per_device + u64::from(j < capacity % per_device);
    let entries: Vec<String> =
        (0..holders).map(|i| format!("{}:{}", i % devices as usize, share((i / devices as usize) as u64))).collect();
    let rss_idle_kib = rss_kib(d.pid());
    let mut children = Vec::new();
    let mut booked = 0;
    for chunk in entries.chunks(holders.div_ceil(HELPERS).max(1)) {
        let mut child = crate::Reaped(
            Command::new(std::env::current_exe()?)
                .arg("--wire-holders")
                .arg(&d.socket)
                .arg(chunk.join(","))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?,
        );
        let out = child.0.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        let n: u64 = line.strip_prefix("ready ").and_then(|n| n.trim().parse().ok()).ok_or_else(|| {
            anyhow::anyhow!("a holder helper said {line:?} instead of ready (npud's log: {})", d.log())
        })?;
        booked += n;
        children.push(child);
    }
    // Let npud settle (its measurement of each device, the holders' sessions) before reading.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let rss_full_kib = rss_kib(d.pid());
    drop(children);
    Ok(NodeMemory { devices, holders, booked, rss_idle_kib, rss_full_kib })
}

/// [`node_memory`] on a daemon of its own: the fake AscendCL with `devices` devices, its
/// connection limits raised for `holders`.
pub fn node_memory_run(devices: u32, holders: usize) -> anyhow::Result<NodeMemory> {
    let dir = tempfile::tempdir()?;
    let most = (holders * 2).to_string();
    let config = format!(
        "[limits]\nmax_connections_per_tenant = {most}\nmax_connections = {most}\nmax_native_processes = {most}\n"
    );
    let d = super::native::node_daemon(&dir.path().join("budget"), devices, &config, &[]);
    node_memory(&d, devices, holders)
}
