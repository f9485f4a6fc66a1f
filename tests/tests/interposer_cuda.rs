//! Issue 19, CUDA: unmodified CUDA driver programs get their streams through npud, whether
//! they link libcuda or fetch the driver through `cuGetProcAddress_v2` as the CUDA runtime
//! does. Processes hold their streams until their stdin closes, so every check happens at
//! a point the test chose.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{cuda_apps, cuda_command, cuda_daemon};
use npud_tests::{Daemon, eventually};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout};
use std::time::{Duration, Instant};

const STREAMS: u32 = 60;

struct App {
    child: Child,
    out: std::io::Lines<BufReader<ChildStdout>>,
}

impl App {
    fn spawn(program: &Path, shared: &Path, npud: Option<&Daemon>) -> App {
        let mut child = cuda_command(program, shared, npud.map(|d| (d, STREAMS)))
            .args([STREAMS.to_string().as_str(), "-1"])
            .env("NPUD_WAIT", "5m")
            .spawn()
            .expect("spawn the program");
        let out = BufReader::new(child.stdout.take().unwrap()).lines();
        App { child, out }
    }

    /// Ok(()) when all its streams exist, Err(CUresult) when creation failed.
    fn started(&mut self) -> Result<(), u32> {
        let line = self.out.next().expect("a line").unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["ok", _] => Ok(()),
            ["fail", code, ..] => Err(code.parse().unwrap()),
            _ => panic!("unexpected output: {line}"),
        }
    }

    fn release(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

fn holder_pids(d: &Daemon) -> Vec<u32> {
    let status = d.npuctl_json(&["status"]);
    status["native_holders"]
        .as_array()
        .map_or(Vec::new(), |a| a.iter().map(|h| h["pid"].as_u64().unwrap() as u32).collect())
}

fn native_held(d: &Daemon) -> u64 {
    let status = d.npuctl_json(&["status"]);
    status["native_holders"].as_array().map_or(0, |a| a.iter().map(|h| h["streams"].as_u64().unwrap()).sum())
}

#[test]
fn forty_cuda_programs_collide_without_npud_and_all_start_under_it() {
    let (program, _) = cuda_apps();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("budget");
    // Without npud: the device runs out part-way and the late programs fail.
    let mut apps: Vec<App> = (0..40).map(|_| App::spawn(program, &shared, None)).collect();
    let verdicts: Vec<Result<(), u32>> = apps.iter_mut().map(App::started).collect();
    assert!(verdicts.iter().any(Result::is_err), "40 x {STREAMS} streams cannot fit 2048");
    assert!(verdicts.iter().filter_map(|v| v.err()).all(|c| c == 2), "CUDA_ERROR_OUT_OF_MEMORY: {verdicts:?}");
    drop(apps);

    let shared = dir.path().join("budget-npud");
    let d = cuda_daemon(&shared, &[]);
    let capacity = d.device0()["capacity"].as_u64().unwrap();
    let fit = capacity / u64::from(STREAMS);
    let mut apps: HashMap<u32, App> = (0..40)
        .map(|_| {
            let a = App::spawn(program, &shared, Some(&d));
            (a.child.id(), a)
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(60), || d.device0()["queued_requests"].as_u64() == Some(40 - fit)
            && native_held(&d) == fit * u64::from(STREAMS)),
        "{fit} programs hold their streams and the rest wait:\n{}",
        d.log()
    );
    // Release granted programs one at a time; each release lets a waiting one in.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !apps.is_empty() {
        assert!(Instant::now() < deadline, "{} programs never got their streams", apps.len());
        let granted = holder_pids(&d).into_iter().find(|p| apps.contains_key(p));
        let Some(mut app) = granted.and_then(|p| apps.remove(&p)) else {
            std::thread::sleep(Duration::from_millis(25));
            continue;
        };
        assert!(app.started().is_ok(), "no program fails under npud");
        app.release();
    }
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && native_held(&d) == 0), "{}", d.log());
}

#[test]
fn a_program_that_fetches_the_driver_through_cu_get_proc_address_is_admitted() {
    let (_, program) = cuda_apps();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("budget");
    let d = cuda_daemon(&shared, &[]);
    let mut app = App::spawn(program, &shared, Some(&d));
    assert!(app.started().is_ok());
    assert_eq!(native_held(&d), u64::from(STREAMS), "streams made through cuGetProcAddress_v2 pointers were admitted");
    assert_eq!(d.in_use(), u64::from(STREAMS));
    app.release();
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "{}", d.log());
}
