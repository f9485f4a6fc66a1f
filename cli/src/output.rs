//! Human tables by default, one JSON document with `-o json`.

use crate::args::Output;
use serde_json::Value;

pub fn emit(output: Output, json: Value, table: impl FnOnce() -> String) {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&json).unwrap_or_else(|_| json.to_string())),
        Output::Table => {
            let text = table();
            if !text.is_empty() {
                println!("{}", text.trim_end());
            }
        }
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

/// A budget bar: used `#`, pooled `+`, free `.`.
pub fn bar(in_use: u32, pooled: u32, capacity: u32, width: usize) -> String {
    if capacity == 0 {
        return String::new();
    }
    let scale = |n: u32| ((u64::from(n) * width as u64).div_ceil(u64::from(capacity)) as usize).min(width);
    let used = scale(in_use);
    let pool = scale(pooled).min(width - used);
    format!("[{}{}{}]", "#".repeat(used), "+".repeat(pool), ".".repeat(width - used - pool))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_tables_line_up() {
        assert_eq!(bar(5, 0, 10, 10), "[#####.....]");
        assert_eq!(bar(2, 3, 10, 10), "[##+++.....]");
        assert_eq!(table(&["A", "BB"], &[vec!["xxx".into(), "y".into()]]), "A    BB\nxxx  y");
    }
}
