//! The interposer's settings, from the environment (read once, on the first hooked call).
//!
//! Under `/etc/ld.so.preload` (how Allocate admits unmodified images) the interposer is in
//! every process of the container, set-uid programs included, whose environment is their
//! caller's. There (`AT_SECURE`) only what restricts the process is honoured: see
//! [`Settings::from_vars`].

use std::path::PathBuf;
use std::time::Duration;

/// A torch_npu process per device: the default stream, 2 from initGlobalStreamState,
/// 2 × 32 pool streams and 4 sync-launch streams (reference/interposition.md §1.4).
pub const DEFAULT_STREAMS: u32 = 71;
/// What a process's first graph capture on a device is admitted for, with no hint and no
/// word from npud (`[budget] capture_headroom`'s default).
pub const DEFAULT_CAPTURE_HEADROOM: u32 = 8;
/// The most `NPUD_CAPTURE_STREAMS` may say: a device's streams.
const MAX_CAPTURE_STREAMS: u32 = 4096;
/// How long a process's first ask may wait in npud's queue.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(600);
/// How long a process that requires npud waits for it to come back (an npud restart or
/// upgrade takes a second or two) before its stream creation is refused.
pub const DEFAULT_CONNECT_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Settings {
    /// npud's socket: `NPUD_SOCKET`, else the socket rule's default.
    pub socket: PathBuf,
    /// Streams per device the process asks for at once (`NPUD_STREAMS`), default stream
    /// included; when unset, the tenant's `process_streams` from npud's welcome, else
    /// [`DEFAULT_STREAMS`].
    pub streams: Option<u32>,
    /// `NPUD_WAIT`: how long the first ask may wait (humantime, or seconds).
    pub wait: Duration,
    /// `NPUD_REQUIRED=1`: refuse with 207008 when npud cannot be reached, instead of
    /// letting the vendor call through.
    pub required: bool,
    /// `NPUD_CONNECT_WAIT`: how long a process that requires npud waits for it to be
    /// reachable before it is refused.
    pub connect_wait: Duration,
    /// `NPUD_CAPTURE_STREAMS`: the streams one graph capture of this process makes, what
    /// its first capture on a device is admitted for (later ones: the most one took).
    pub capture_streams: Option<u32>,
    /// On Kubernetes, the allocation token mounted into the container: the contents of
    /// the file `NPUD_ALLOCATION` names (empty when unset or unreadable).
    pub allocation: String,
    /// Variables that were set but could not be used (the default stands in): a typo in
    /// `NPUD_STREAMS` should not pass for the default without a word.
    pub ignored: Vec<String>,
}

impl Settings {
    /// The settings, saying once on stderr which variables were ignored.
    pub fn from_env() -> Settings {
        let secure = crate::sys::secure();
        let token = |path: &std::path::Path| match secure {
            // Its caller's rights, never the set-uid owner's: a file the caller cannot
            // read is not sent anywhere on its behalf.
            true => crate::sys::open_as_caller(path).ok().and_then(npud_proto::allocation_token_of),
            false => npud_proto::read_allocation_token(path),
        };
        let s = Self::from_vars(|k| std::env::var(k).ok(), secure, token);
        for line in &s.ignored {
            eprintln!("npud-preload: {line}");
        }
        s
    }

    /// The settings from `var`; `token` reads the allocation token at a path.
    ///
    /// In a set-uid, set-gid or file-capability program (`secure`) the environment is its
    /// caller's, so only what restricts is honoured: `NPUD_REQUIRED=1`, and `NPUD_WAIT` and
    /// `NPUD_CONNECT_WAIT` shorter than their defaults. The socket is the root default
    /// ([`npud_proto::ROOT_SOCKET`], where the DaemonSet serves and Allocate mounts it),
    /// the token is read from where Allocate mounts it ([`npud_proto::CONTAINER_TOKEN_PATH`])
    /// with the caller's rights, and a container whose token is there requires npud (its
    /// `NPUD_REQUIRED` may have been scrubbed by sudo or the like). `NPUD_STREAMS`,
    /// `NPUD_SOCKET` and `NPUD_ALLOCATION` are ignored, and said to be.
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        secure: bool,
        token: impl Fn(&std::path::Path) -> Option<String>,
    ) -> Settings {
        let mut ignored = Vec::new();
        let mut note = |name: &str, text: &str, what: &str| {
            let shown: String = text.chars().take(32).collect();
            ignored.push(format!("{name}={shown:?} is not {what}; it is ignored"));
        };
        let capture_streams = var("NPUD_CAPTURE_STREAMS").and_then(|text| {
            let n = text.trim().parse::<u32>().ok().filter(|n| (1..=MAX_CAPTURE_STREAMS).contains(n));
            if n.is_none() {
                note("NPUD_CAPTURE_STREAMS", &text, "a count of streams from 1 to 4096");
            }
            n
        });
        let streams = var("NPUD_STREAMS").and_then(|text| {
            let n = text.trim().parse::<u32>().ok().filter(|n| *n > 0);
            if n.is_none() {
                note("NPUD_STREAMS", &text, "a count of streams from 1 to 4294967295");
            }
            n
        });
        let mut duration = |name: &str| {
            var(name).and_then(|text| {
                let d = parse_duration(text.trim());
                if d.is_none() {
                    note(name, &text, "a duration such as 30s, 10m or a number of seconds");
                }
                d
            })
        };
        let wait = duration("NPUD_WAIT");
        let connect_wait = duration("NPUD_CONNECT_WAIT");
        let required = var("NPUD_REQUIRED").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        let trimmed = |t: String| t.chars().take(256).collect::<String>();
        if secure {
            for name in ["NPUD_STREAMS", "NPUD_SOCKET", "NPUD_ALLOCATION", "NPUD_CAPTURE_STREAMS"] {
                if var(name).is_some() {
                    ignored.push(format!("{name} is not honoured in a set-uid or set-gid program; it is ignored"));
                }
            }
            let allocation = token(std::path::Path::new(npud_proto::CONTAINER_TOKEN_PATH)).map(trimmed);
            return Settings {
                socket: npud_proto::ROOT_SOCKET.into(),
                streams: None,
                capture_streams: None,
                wait: wait.unwrap_or(DEFAULT_WAIT).min(DEFAULT_WAIT),
                required: required || allocation.is_some(),
                connect_wait: connect_wait.unwrap_or(DEFAULT_CONNECT_WAIT).min(DEFAULT_CONNECT_WAIT),
                allocation: allocation.unwrap_or_default(),
                ignored,
            };
        }
        Settings {
            socket: var("NPUD_SOCKET")
                .filter(|s| !s.is_empty())
                .map_or_else(npud_proto::default_socket_path, PathBuf::from),
            streams,
            capture_streams,
            wait: wait.unwrap_or(DEFAULT_WAIT),
            required,
            connect_wait: connect_wait.unwrap_or(DEFAULT_CONNECT_WAIT),
            allocation: var("NPUD_ALLOCATION")
                .filter(|p| !p.is_empty())
                .and_then(|p| token(std::path::Path::new(&p)))
                .map(trimmed)
                .unwrap_or_default(),
            ignored,
        }
    }
}

fn parse_duration(s: &str) -> Option<Duration> {
    match s.parse::<u64>() {
        Ok(secs) => Some(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(s).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_token(_: &std::path::Path) -> Option<String> {
        None
    }

    /// Issue 70: a set-uid program's caller steers nothing but what restricts it.
    #[test]
    fn a_secure_program_honours_only_what_restricts_it() {
        let hostile = |k: &str| match k {
            "NPUD_SOCKET" => Some("/home/mallory/listener.sock".into()),
            "NPUD_ALLOCATION" => Some("/root/secret".into()),
            "NPUD_STREAMS" => Some("2000".into()),
            "NPUD_WAIT" => Some("1h".into()),
            "NPUD_CONNECT_WAIT" => Some("1h".into()),
            _ => None,
        };
        let asked = std::sync::Mutex::new(Vec::new());
        let token = |p: &std::path::Path| {
            asked.lock().unwrap().push(p.to_path_buf());
            None
        };
        let s = Settings::from_vars(hostile, true, token);
        assert_eq!(s.socket, PathBuf::from(npud_proto::ROOT_SOCKET));
        assert_eq!((s.streams, s.wait, s.connect_wait, s.required), (None, DEFAULT_WAIT, DEFAULT_CONNECT_WAIT, false));
        assert_eq!(*asked.lock().unwrap(), [PathBuf::from(npud_proto::CONTAINER_TOKEN_PATH)]);
        assert_eq!(s.ignored.len(), 3, "{:?}", s.ignored);
        // Shorter waits and NPUD_REQUIRED restrict: honoured.
        let strict = |k: &str| match k {
            "NPUD_WAIT" => Some("5s".into()),
            "NPUD_CONNECT_WAIT" => Some("1s".into()),
            "NPUD_REQUIRED" => Some("1".into()),
            _ => None,
        };
        let s = Settings::from_vars(strict, true, no_token);
        assert_eq!((s.wait, s.connect_wait, s.required), (Duration::from_secs(5), Duration::from_secs(1), true));
        // A container's token where Allocate mounts it: presented, and npud required.
        let s = Settings::from_vars(|_| None, true, |_| Some("tok".into()));
        assert_eq!((s.allocation.as_str(), s.required), ("tok", true));
    }

    #[test]
    fn settings_come_from_the_environment_with_named_defaults() {
        let s = Settings::from_vars(
            |k| match k {
                "NPUD_SOCKET" => Some("/tmp/x.sock".into()),
                "NPUD_STREAMS" => Some("61".into()),
                "NPUD_WAIT" => Some("30s".into()),
                "NPUD_REQUIRED" => Some("1".into()),
                "NPUD_CONNECT_WAIT" => Some("2s".into()),
                _ => None,
            },
            false,
            no_token,
        );
        assert_eq!(
            (s.socket, s.streams, s.wait, s.required, s.connect_wait),
            ("/tmp/x.sock".into(), Some(61), Duration::from_secs(30), true, Duration::from_secs(2))
        );
        assert!(s.ignored.is_empty(), "{:?}", s.ignored);
        let d = Settings::from_vars(
            |k| match k {
                "NPUD_STREAMS" => Some("zero".into()),
                "NPUD_WAIT" => Some("soon".into()),
                _ => None,
            },
            false,
            no_token,
        );
        assert_eq!((d.streams, d.wait, d.required), (None, DEFAULT_WAIT, false));
        assert_eq!(
            d.ignored,
            [
                "NPUD_STREAMS=\"zero\" is not a count of streams from 1 to 4294967295; it is ignored",
                "NPUD_WAIT=\"soon\" is not a duration such as 30s, 10m or a number of seconds; it is ignored"
            ]
        );
    }
}
