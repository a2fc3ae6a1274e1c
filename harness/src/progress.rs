//! Progress lines on stderr: elapsed time, row, step.

use std::time::Instant;

pub struct Progress {
    start: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

impl Progress {
    pub fn new() -> Progress {
        Progress { start: Instant::now() }
    }

    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn stamp(&self) -> String {
        let s = self.start.elapsed().as_secs();
        format!("[{:>3}m{:02}s]", s / 60, s % 60)
    }

    /// A step starts.
    pub fn step(&self, row: &str, step: &str) {
        eprintln!("{} {row} › {step}", self.stamp());
    }

    /// A step ended, with how long it took and how it went.
    pub fn done(&self, row: &str, step: &str, secs: f64, outcome: &str) {
        eprintln!("{} {row} › {step}: {outcome} ({secs:.1}s)", self.stamp());
    }
}
