//! Helpers shared by the root package's bench binaries (`vs_python`, `pg_vs_embedded`): a
//! seeded RNG, environment knobs, percentiles and rounding for the JSON they print. Included by
//! each bench with `#[path = "common/mod.rs"] mod common;` (a folder with `mod.rs` and no
//! `main.rs` is no bench target of its own).

use serde_json::{Value, json};

/// splitmix64: the generated data is the same on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn gaussian(&mut self) -> f64 {
        let u1 = self.unit().max(1e-12);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// A `usize` from the environment, or `default` when unset or unparsable.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

pub fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The `q` quantile (0..=1) of `samples`, nearest rank; NaN when empty.
pub fn percentile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1);
    sorted[index]
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` prints them.
pub fn load_average() -> Value {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| json!(s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")))
        .unwrap_or(Value::Null)
}
