//! Percentiles and number formatting for the Markdown tables.

use std::time::Duration;

/// The `p` quantile of sorted durations (nearest rank).
pub fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[((sorted.len() as f64 - 1.0) * p).round() as usize])
}

pub fn ms_f(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1000.0)
}

/// Milliseconds with one decimal, or a dash.
pub fn ms(d: Option<Duration>) -> String {
    d.map_or("–".into(), |d| format!("{:.1}", d.as_secs_f64() * 1000.0))
}

/// p50 / p99 / max in ms of sorted durations.
pub fn p50_p99_max(sorted: &[Duration]) -> String {
    format!("{} / {} / {}", ms(percentile(sorted, 0.5)), ms(percentile(sorted, 0.99)), ms(sorted.last().copied()))
}

/// The same as JSON: `{"p50":..,"p99":..,"max":..,"n":..}` in ms.
pub fn latency_json(sorted: &[Duration]) -> serde_json::Value {
    serde_json::json!({
        "n": sorted.len(),
        "p50": ms_f(percentile(sorted, 0.5)),
        "p99": ms_f(percentile(sorted, 0.99)),
        "max": ms_f(sorted.last().copied()),
    })
}

/// Rounded, without a "-0".
pub fn fmt0(x: f64) -> String {
    format!("{:.0}", x.round() + 0.0)
}

pub fn fmt1(x: f64) -> String {
    format!("{:.1}", (x * 10.0).round() / 10.0 + 0.0)
}

pub fn fmt2(x: f64) -> String {
    format!("{:.2}", (x * 100.0).round() / 100.0 + 0.0)
}

pub fn mib(b: f64) -> String {
    format!("{:.1}", b / (1024.0 * 1024.0))
}

pub fn signed_mib(d: f64) -> String {
    format!("{:+.1}", d / (1024.0 * 1024.0))
}

/// 12345 → "12,345".
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A Markdown table with one column per side: rows of (label, cells).
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(head: &[&str]) -> Self {
        Self { head: head.iter().map(|s| (*s).to_owned()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn print(&self) {
        println!("| {} |", self.head.join(" | "));
        println!("|{}", "---|".repeat(self.head.len()));
        for r in &self.rows {
            println!("| {} |", r.join(" | "));
        }
        println!();
    }
}

/// A Markdown table with one column per side, a row per measurement.
pub struct SideTable<'a, S> {
    sides: &'a [S],
    table: Table,
}

impl<'a, S> SideTable<'a, S> {
    pub fn new(sides: &'a [S], title: impl Fn(&S) -> &'static str) -> Self {
        let mut head = vec!["measurement"];
        head.extend(sides.iter().map(title));
        Self { sides, table: Table::new(&head) }
    }

    /// A row: `label`, then `f` of every side.
    pub fn row(&mut self, label: &str, f: impl Fn(&S) -> String) {
        let mut cells = vec![label.to_owned()];
        cells.extend(self.sides.iter().map(f));
        self.table.row(cells);
    }

    pub fn print(&self) {
        self.table.print();
    }
}
