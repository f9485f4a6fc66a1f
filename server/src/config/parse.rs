//! Turning the file's and the flags' text into typed values, and collecting what is wrong
//! with them: one run of `npud` reports every problem of a config, not only the first.

use super::ConfigError;
use std::net::SocketAddr;
use std::time::Duration;

/// Everything wrong with a configuration, in the order it was found.
#[derive(Debug, Default)]
pub(super) struct Problems(Vec<String>);

impl Problems {
    /// The value, or `fallback` with the error noted, so checking goes on.
    pub fn take<T>(&mut self, result: Result<T, ConfigError>, fallback: T) -> T {
        result.unwrap_or_else(|e| {
            self.0.push(e.0);
            fallback
        })
    }

    pub fn push(&mut self, problem: impl Into<String>) {
        self.0.push(problem.into());
    }

    /// Notes `problem` when `bad` holds.
    pub fn check(&mut self, bad: bool, problem: impl FnOnce() -> String) {
        if bad {
            self.0.push(problem());
        }
    }

    /// One problem reads as itself; several are listed one per line.
    pub fn finish(self) -> Result<(), ConfigError> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(ConfigError(self.0.into_iter().collect())),
            n => Err(ConfigError(format!("{n} problems in the configuration:\n  {}", self.0.join("\n  ")))),
        }
    }
}

pub(super) fn bounded(key: &str, d: Duration, max: Duration) -> Result<Duration, ConfigError> {
    if d > max {
        return Err(ConfigError(format!(
            "{key}: {} is longer than the most, {}",
            humantime::format_duration(d),
            humantime::format_duration(max)
        )));
    }
    Ok(d)
}

pub(crate) fn duration(key: &str, text: Option<&str>, default: Duration) -> Result<Duration, ConfigError> {
    match text {
        None => Ok(default),
        Some(t) => {
            humantime::parse_duration(t).map_err(|e| ConfigError(format!("{key}: {t:?} is not a duration ({e})")))
        }
    }
}

pub(super) fn mode(key: &str, text: Option<&str>, default: u32) -> Result<u32, ConfigError> {
    match text {
        None => Ok(default),
        Some(t) => match u32::from_str_radix(t.trim_start_matches("0o"), 8) {
            Ok(m) if m <= 0o777 => Ok(m),
            _ => Err(ConfigError(format!("{key}: {t:?} is not an octal file mode like \"0660\""))),
        },
    }
}

pub(super) fn addr(key: &str, text: Option<&str>) -> Result<Option<SocketAddr>, ConfigError> {
    text.map(|t| t.parse().map_err(|e| ConfigError(format!("{key}: {t:?} is not HOST:PORT ({e})")))).transpose()
}

/// A group by number or by name (looked up in /etc/group, no libc call needed).
pub(super) fn group_id(text: &str) -> Result<u32, ConfigError> {
    if let Ok(gid) = text.parse() {
        return Ok(gid);
    }
    let groups = std::fs::read_to_string("/etc/group")
        .map_err(|e| ConfigError(format!("socket_group: cannot read /etc/group: {e}")))?;
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            Some((f.next()?, f.nth(1)?))
        })
        .find(|(name, _)| *name == text)
        .and_then(|(_, gid)| gid.parse().ok())
        .ok_or_else(|| ConfigError(format!("socket_group: no group named {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_problems_are_listed_and_one_reads_as_itself() {
        let mut p = Problems::default();
        assert!(Problems::default().finish().is_ok());
        assert_eq!(p.take(duration("lease", Some("soon"), Duration::ZERO), Duration::from_secs(1)).as_secs(), 1);
        p.check(true, || "limits.x must be at least 1".into());
        let text = p.finish().unwrap_err().0;
        assert!(text.starts_with("2 problems in the configuration:\n"), "{text}");
        assert!(text.contains("lease: \"soon\" is not a duration") && text.contains("limits.x"), "{text}");
        let mut one = Problems::default();
        one.push("sim devices must be 1..=64, got 0");
        assert_eq!(one.finish().unwrap_err().0, "sim devices must be 1..=64, got 0");
    }

    #[test]
    fn modes_addresses_and_durations_parse_or_say_why() {
        assert_eq!(mode("socket_mode", Some("0660"), 0).unwrap(), 0o660);
        assert_eq!(mode("socket_mode", Some("0o700"), 0).unwrap(), 0o700);
        assert!(mode("socket_mode", Some("1777"), 0).unwrap_err().0.contains("octal file mode"));
        assert!(mode("socket_mode", Some("rw"), 0).is_err());
        assert_eq!(addr("listen", Some("127.0.0.1:50051")).unwrap().map(|a| a.port()), Some(50051));
        assert!(addr("listen", Some("localhost")).unwrap_err().0.starts_with("listen: \"localhost\""));
        assert_eq!(duration("lease", None, Duration::from_secs(3)).unwrap(), Duration::from_secs(3));
        assert_eq!(duration("lease", Some("250ms"), Duration::ZERO).unwrap(), Duration::from_millis(250));
        let long = bounded("budget.native_pacing", Duration::from_secs(100), Duration::from_secs(10));
        assert!(long.unwrap_err().0.contains("longer than the most, 10s"));
        assert_eq!(group_id("4242").unwrap(), 4242);
        assert!(group_id("no-such-group-here").unwrap_err().0.contains("no group named"));
    }
}
