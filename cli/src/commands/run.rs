//! `npuctl run [--streams N] [--wait D] -- CMD ARGS...`: execs CMD (same pid) with the
//! interposer preloaded and pointed at this daemon, so an unmodified program's native
//! streams are admitted by npud.

use anyhow::Context;
use clap::Args;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The interposer's file name, looked for next to npuctl, then in the install directory.
const LIBRARY: &str = "libnpud_preload.so";
const INSTALLED: &str = "/usr/local/lib/npud/libnpud_preload.so";

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Streams per device the program asks for at once, its default stream included
    /// [default: the tenant's usual start-up need, 71 for a torch_npu process].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub streams: Option<u32>,
    /// How long the first ask may wait in npud's queue before creation fails with 207008.
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration)]
    pub wait: Option<Duration>,
    /// Fail stream creation with 207008 when npud cannot be reached (default: let the
    /// vendor create without admission and warn once).
    #[arg(long)]
    pub required: bool,
    /// The interposer library [default: libnpud_preload.so next to npuctl, else /usr/local/lib/npud/].
    #[arg(long, value_name = "PATH", env = "NPUD_PRELOAD")]
    pub library: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<String>,
}

fn library(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        anyhow::ensure!(p.is_file(), "the interposer {} does not exist", p.display());
        return Ok(p.to_path_buf());
    }
    let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join(LIBRARY)));
    beside
        .into_iter()
        .chain([PathBuf::from(INSTALLED)])
        .find(|p| p.is_file())
        .with_context(|| format!("cannot find {LIBRARY} next to npuctl or at {INSTALLED}; pass --library"))
}

/// `LD_PRELOAD` with the interposer first and the caller's own list after it. The loader
/// splits the list at spaces and colons and has no escape for either (ld.so(8)), so a
/// library path holding one would be cut in two and the program would run without the
/// interposer, the loader's complaint its only sign: refused here instead. Built from the
/// path's bytes, so a path that is not UTF-8 is passed on as it is.
fn preload_list(lib: &Path) -> anyhow::Result<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    anyhow::ensure!(
        !lib.as_os_str().as_bytes().iter().any(|b| matches!(b, b' ' | b':')),
        "the interposer's path {} holds a space or a colon, which LD_PRELOAD cannot carry; \
         put the library where its path has neither and pass --library",
        lib.display()
    );
    let mut list = lib.as_os_str().to_owned();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        list.push(" ");
        list.push(existing);
    }
    Ok(list)
}

/// The exit status when the program was not found, and when it was found but could not
/// be executed: a shell's, and `env`'s, `timeout`'s and `sudo`'s, so scripts that wrap a
/// command in `npuctl run` tell these apart from the program's own failures.
pub const NOT_FOUND: u8 = 127;
pub const NOT_EXECUTABLE: u8 = 126;

/// Replaces this process with the program; returns only if that failed, with the exit
/// status to leave with: 127 or 126 when the program could not be started, 1 when npuctl
/// could not prepare it.
pub fn exec(args: &RunArgs, socket: Option<&Path>) -> (anyhow::Error, u8) {
    let lib = match library(args.library.as_deref()) {
        Ok(l) => l,
        Err(e) => return (e, 1),
    };
    let socket = socket.map_or_else(npud_proto::default_socket_path, Path::to_path_buf);
    let preload = match preload_list(&lib) {
        Ok(p) => p,
        Err(e) => return (e, 1),
    };
    let Some((program, rest)) = args.command.split_first() else {
        return (anyhow::anyhow!("no program to run"), 1);
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest).env("LD_PRELOAD", preload).env("NPUD_SOCKET", &socket);
    if let Some(n) = args.streams {
        cmd.env("NPUD_STREAMS", n.to_string());
    }
    if let Some(w) = args.wait {
        cmd.env("NPUD_WAIT", format!("{}ms", w.as_millis()));
    }
    if args.required {
        cmd.env("NPUD_REQUIRED", "1");
    }
    let e = cmd.exec();
    let code = if e.kind() == std::io::ErrorKind::NotFound { NOT_FOUND } else { NOT_EXECUTABLE };
    (anyhow::Error::from(e).context(format!("cannot run {program}")), code)
}
