//! Human tables by default, one JSON document with `-o json`.

use clap::ValueEnum;
use serde_json::Value;

/// `-o`: what npuctl prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

pub fn emit(output: Output, json: Value, table: impl FnOnce() -> String) {
    match output {
        Output::Json => write_out(&serde_json::to_string_pretty(&json).unwrap_or_else(|_| json.to_string())),
        Output::Table => {
            let text = table();
            if !text.is_empty() {
                write_out(text.trim_end());
            }
        }
    }
}

/// Writes a line to stdout. A closed pipe (`npuctl ... | head`) ends the program quietly
/// instead of panicking as `println!` would.
pub fn write_out(text: &str) {
    write_bytes(format!("{text}\n").as_bytes());
}

pub fn write_bytes(bytes: &[u8]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("npuctl: cannot write output: {e}");
        std::process::exit(1);
    }
}

/// Left-aligned columns separated by two spaces.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_string()
    };
    let mut out = line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.clone()));
    }
    out
}

/// Colours only on a terminal, and never with NO_COLOR set.
pub fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// A budget bar: used `#`, pooled `+`, free `.` (red, yellow, green on a terminal).
pub fn bar(in_use: u32, pooled: u32, capacity: u32, width: usize) -> String {
    bar_styled(in_use, pooled, capacity, width, colour())
}

pub fn bar_styled(in_use: u32, pooled: u32, capacity: u32, width: usize, colour: bool) -> String {
    if capacity == 0 {
        return String::new();
    }
    let scale = |n: u32| ((u64::from(n) * width as u64).div_ceil(u64::from(capacity)) as usize).min(width);
    let used = scale(in_use);
    let pool = scale(pooled).min(width - used);
    let (u, p, f) = ("#".repeat(used), "+".repeat(pool), ".".repeat(width - used - pool));
    if colour { format!("[\x1b[31m{u}\x1b[33m{p}\x1b[32m{f}\x1b[0m]") } else { format!("[{u}{p}{f}]") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_tables_line_up() {
        assert_eq!(bar_styled(5, 0, 10, 10, false), "[#####.....]");
        assert_eq!(bar_styled(2, 3, 10, 10, false), "[##+++.....]");
        assert!(bar_styled(2, 3, 10, 10, true).contains("\x1b[31m##"));
        assert_eq!(table(&["A", "BB"], &[vec!["xxx".into(), "y".into()]]), "A    BB\nxxx  y");
    }
}
