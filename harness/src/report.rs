//! The matrix report: one data model (`report.json`, schema in
//! harness/README.md) rendered as report.md and report.html.

use crate::audit::AuditResult;
use crate::outcome::{GuardMessage, TestCounts};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

pub const SCHEMA: &str = "legacy-ml-matrix-report/1";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    pub generated_utc: String,
    /// `full` or `quick`.
    pub mode: String,
    pub builder: String,
    pub ok: bool,
    pub elapsed_secs: f64,
    pub host: HostInfo,
    /// (tool, version line) pairs.
    pub toolchain: Vec<(String, String)>,
    /// What set-up installed or could not.
    pub setup: Vec<String>,
    pub golden: Vec<GoldenInfo>,
    pub rows: Vec<RowReport>,
    pub bench: BenchInfo,
    /// Per target triple, how its cells ran when that needs saying (the
    /// Windows rows: under Wine, with the stand-in DLL).
    #[serde(default)]
    pub target_notes: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostInfo {
    pub arch: String,
    pub triple: String,
    pub cpu: String,
    pub features: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GoldenInfo {
    pub name: String,
    pub path: String,
    pub gen_args: Vec<String>,
    /// The model file in the repository, for goldens not made by `ml gen`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub tokens: Vec<u32>,
    pub steps: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct BenchInfo {
    pub available: bool,
    pub note: String,
    #[serde(default)]
    pub results: Vec<BenchResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchResult {
    pub tier: String,
    pub row: String,
    pub ran_as: String,
    pub tokens_per_sec: f64,
    pub speedup_vs_scalar: Option<f64>,
    /// Timings under emulation are functional only, never compared.
    pub emulated: bool,
    #[serde(default)]
    pub target: String,
    /// Decode speed as a fraction of the memory-bandwidth roofline.
    #[serde(default)]
    pub roofline_fraction: Option<f64>,
    /// Every run's tok/s in round order; `tokens_per_sec` is their median.
    #[serde(default)]
    pub runs: Vec<f64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RowStatus {
    /// Every cell met its expectation.
    Ok,
    Failed,
    /// Built (or, for a tier the runtime lacks, not buildable yet) but not run.
    CompileOnly,
    Unavailable,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    pub status: StepStatus,
    pub detail: String,
    pub seconds: f64,
}

/// How a step of a row ended; the JSON report spells it `ok`, `failed`,
/// `skipped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    Ok,
    Failed,
    Skipped,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Ok => "ok",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
        }
    }
}

impl std::fmt::Display for StepStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Step {
    pub fn ok(detail: impl Into<String>, seconds: f64) -> Step {
        Step {
            status: StepStatus::Ok,
            detail: detail.into(),
            seconds,
        }
    }
    pub fn failed(detail: impl Into<String>, seconds: f64) -> Step {
        Step {
            status: StepStatus::Failed,
            detail: detail.into(),
            seconds,
        }
    }
    pub fn skipped(detail: impl Into<String>) -> Step {
        Step {
            status: StepStatus::Skipped,
            detail: detail.into(),
            seconds: 0.0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RowReport {
    pub name: String,
    pub tier: String,
    pub target: String,
    pub cargo_features: Vec<String>,
    pub rustflags: Vec<String>,
    pub status: RowStatus,
    /// Why compile-only / unavailable / failed, in one line.
    pub note: String,
    pub build: Step,
    pub tests_build: Step,
    pub test_binaries: Vec<String>,
    /// `rustc --print cfg --target <T> <rustflags>`: the target_feature values.
    pub cfg_target_features: Vec<String>,
    /// What this build's guard checks (`ml isa`: "needs features").
    pub guard_needs: Vec<String>,
    pub audit_step: Step,
    pub audit: Option<AuditResult>,
    pub cells: Vec<CellReport>,
    /// `ml bench` on the native CPU (full mode, native pass rows only).
    #[serde(default)]
    pub bench: Option<BenchResult>,
}

impl RowReport {
    /// The grid's build + audit column: `ok`, `FAIL (…)` or why not built.
    pub fn build_audit(&self, n: usize) -> String {
        use StepStatus::{Failed, Ok, Skipped};
        match (self.build.status, self.audit_step.status) {
            (Failed, _) => format!("FAIL (build: {})", short(&self.build.detail, n)),
            (Skipped, _) if self.status == RowStatus::Unavailable => "unavailable".into(),
            (Skipped, _) => "not built (tier not implemented)".into(),
            (_, Failed) => format!("FAIL (audit: {})", short(&self.audit_step.detail, n)),
            (Ok, Ok) => "ok".into(),
            (b, a) => format!("build {b}, audit {a}"),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum CellResult {
    Pass,
    Rejected,
    Fail,
    CompileOnly,
    Unavailable,
    /// A CPU below the target's floor died of SIGILL in the C library's
    /// start-up before any of the executable ran, as the cell expected.
    BelowFloor,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellReport {
    pub cpu: String,
    /// Grid column: `native`, `qemu:<model>` or a compile-only label.
    pub label: String,
    /// How it really ran: `native`, `qemu:<model>`, or `not run`.
    pub ran_as: String,
    /// The runner's command line (`qemu-aarch64 -L … -cpu …`).
    pub runner: String,
    pub expect: String,
    pub result: CellResult,
    /// Failure / compile-only / unavailable reason.
    pub reason: String,
    /// Features the build's `ml isa` saw on this CPU.
    pub detected_features: Option<Vec<String>>,
    pub kernel_tests: Vec<TestRun>,
    pub e2e: Vec<E2e>,
    pub guard: Option<GuardMessage>,
    pub seconds: f64,
    /// Guest instructions per decoded and per prompt token, per golden model (pass cells
    /// under qemu; `harness::icount`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icount: Vec<crate::icount::TokenCost>,
}

impl CellReport {
    /// The grid's text for this cell.
    pub fn grid(&self) -> String {
        self.grid_within(90)
    }

    /// The grid's text with the reason cut to `n` characters.
    pub fn grid_within(&self, n: usize) -> String {
        match self.result {
            CellResult::Pass => "pass".into(),
            CellResult::Rejected => "rejected-cleanly".into(),
            CellResult::Fail => format!("FAIL ({})", short(&self.reason, n)),
            CellResult::CompileOnly => "compile-only".into(),
            CellResult::Unavailable => format!("unavailable: {}", short(&self.reason, n)),
            CellResult::BelowFloor => "below-floor (SIGILL in libc start-up, before ml)".into(),
        }
    }

    pub fn met(&self) -> bool {
        matches!(
            self.result,
            CellResult::Pass | CellResult::Rejected | CellResult::CompileOnly | CellResult::BelowFloor
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestRun {
    pub name: String,
    pub ok: bool,
    /// `ran`, `rejected` (guard exit 7 on a reject CPU), or the failure.
    pub detail: String,
    pub counts: TestCounts,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct E2e {
    pub golden: String,
    pub ok: bool,
    pub max_rel_err: Option<f64>,
    pub worst_pos: Option<usize>,
    pub tokens_match: Option<bool>,
    pub detail: String,
}

fn short(s: &str, n: usize) -> String {
    let one = s.replace('\n', " ");
    if one.chars().count() <= n {
        one
    } else {
        format!("{}…", one.chars().take(n).collect::<String>())
    }
}

/// Now, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil-from-days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Target triple → the grid section it belongs to.
fn groups(r: &Report) -> Vec<(String, Vec<&RowReport>, Vec<String>)> {
    let mut out: Vec<(String, Vec<&RowReport>, Vec<String>)> = Vec::new();
    for row in &r.rows {
        let idx = match out.iter().position(|(t, _, _)| *t == row.target) {
            Some(i) => i,
            None => {
                out.push((row.target.clone(), Vec::new(), Vec::new()));
                out.len() - 1
            }
        };
        out[idx].1.push(row);
        for c in &row.cells {
            if !out[idx].2.contains(&c.label) {
                out[idx].2.push(c.label.clone());
            }
        }
    }
    out
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

pub fn grid_markdown(r: &Report) -> String {
    let mut s = String::new();
    for (target, rows, labels) in groups(r) {
        let _ = writeln!(s, "### {target}\n");
        if let Some(note) = r.target_notes.get(&target) {
            let _ = writeln!(s, "{}\n", md_escape(note));
        }
        let _ = writeln!(
            s,
            "| row | build + audit | {} |",
            labels.iter().map(|l| md_escape(l)).collect::<Vec<_>>().join(" | ")
        );
        let _ = writeln!(s, "|---|---|{}", "---|".repeat(labels.len()));
        for row in rows {
            let cells: Vec<String> = labels
                .iter()
                .map(|l| match row.cells.iter().find(|c| &c.label == l) {
                    Some(c) => md_escape(&c.grid()),
                    None => "—".into(),
                })
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                row.name,
                md_escape(&row.build_audit(90)),
                cells.join(" | ")
            );
        }
        s.push('\n');
    }
    s
}

pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# legacy-ml matrix report\n");
    let _ = writeln!(
        s,
        "**{}** — {} rows, mode `{}`, builder `{}`, {:.0} s, generated {}.\n",
        if r.ok {
            "PASS: every row met its expectation"
        } else {
            "FAIL: some rows did not meet their expectation"
        },
        r.rows.len(),
        r.mode,
        r.builder,
        r.elapsed_secs,
        r.generated_utc
    );
    let _ = writeln!(
        s,
        "Host: {} ({}), features: {}.\n",
        r.host.cpu,
        r.host.triple,
        r.host.features.join(" ")
    );
    let _ = writeln!(s, "## Compatibility grid\n");
    let _ = writeln!(
        s,
        "Cells: `pass` (kernel tests and golden e2e pass on that CPU), `rejected-cleanly` (the guard exited 7 naming the missing feature), \
         `FAIL (reason)`, `compile-only` (built and audited, not run), `unavailable` (a tool is missing), \
         `below-floor` (a CPU below the target's own floor: qemu's trace shows the SIGILL in the C library's start-up, before any instruction of the binary ran). \
         Column = how it ran: `native` or `qemu:<model>`.\n"
    );
    s.push_str(&grid_markdown(r));
    let _ = writeln!(s, "## Rows\n");
    for row in &r.rows {
        let _ = writeln!(s, "### {} — {:?}\n", row.name, row.status);
        let _ = writeln!(
            s,
            "- build: `{}` features [{}] rustflags [{}] → {} {}",
            row.target,
            row.cargo_features.join(", "),
            row.rustflags.join(" "),
            row.build.status,
            md_escape(&row.build.detail)
        );
        if !row.note.is_empty() {
            let _ = writeln!(s, "- note: {}", md_escape(&row.note));
        }
        let _ = writeln!(
            s,
            "- rustc --print cfg target features: {}",
            if row.cfg_target_features.is_empty() {
                "(none reported)".into()
            } else {
                row.cfg_target_features.join(" ")
            }
        );
        let _ = writeln!(
            s,
            "- guard checks (ml isa): {}",
            if row.guard_needs.is_empty() {
                "(nothing)".into()
            } else {
                row.guard_needs.join(" ")
            }
        );
        let _ = writeln!(
            s,
            "- test build: {} {}",
            row.tests_build.status,
            md_escape(&row.tests_build.detail)
        );
        let _ = writeln!(
            s,
            "- audit: {} {}",
            row.audit_step.status,
            md_escape(&row.audit_step.detail)
        );
        if let Some(a) = &row.audit {
            for e in &a.exceptions {
                let _ = writeln!(s, "  - allowed exception: {}", md_escape(e));
            }
        }
        for c in &row.cells {
            let _ = writeln!(s, "- **{}** (expect {}) → {}", c.label, c.expect, md_escape(&c.grid()));
            if c.ran_as != "not run" {
                let _ = writeln!(s, "  - ran as `{}`: `{}`", c.ran_as, c.runner);
            }
            if let Some(f) = &c.detected_features {
                let _ = writeln!(
                    s,
                    "  - CPU features seen by the build: {}",
                    if f.is_empty() { "(none)".into() } else { f.join(" ") }
                );
            }
            if !c.kernel_tests.is_empty() {
                let passed: u32 = c.kernel_tests.iter().map(|t| t.counts.passed).sum();
                let failed: u32 = c.kernel_tests.iter().map(|t| t.counts.failed).sum();
                let bad: Vec<String> = c
                    .kernel_tests
                    .iter()
                    .filter(|t| !t.ok)
                    .map(|t| format!("{}: {}", t.name, t.detail))
                    .collect();
                let rejected = c.kernel_tests.iter().filter(|t| t.detail == "rejected").count();
                let _ = writeln!(
                    s,
                    "  - kernel tests: {} binaries, {passed} passed, {failed} failed{}{}",
                    c.kernel_tests.len(),
                    if rejected > 0 {
                        format!(", {rejected} rejected by the guard")
                    } else {
                        String::new()
                    },
                    if bad.is_empty() {
                        String::new()
                    } else {
                        format!(" — {}", md_escape(&bad.join("; ")))
                    }
                );
            }
            for e in &c.e2e {
                let _ = writeln!(s, "  - e2e {}: {}", e.golden, md_escape(&e.detail));
            }
            if let Some(g) = &c.guard {
                let _ = writeln!(s, "  - guard: exit 7, missing: {}", g.missing.join(" "));
            }
        }
        s.push('\n');
    }
    s.push_str(&crate::icount::markdown(&r.rows));
    let _ = writeln!(s, "## Benchmarks\n");
    if r.bench.available && !r.bench.results.is_empty() {
        let _ = writeln!(s, "{}\n", r.bench.note);
        let _ = writeln!(
            s,
            "| tier | row | ran as | decode tok/s (median) | runs | speedup vs scalar | of roofline |\n|---|---|---|---|---|---|---|"
        );
        for b in &r.bench.results {
            let speed = if b.emulated {
                "functional-only (emulated)".to_string()
            } else {
                b.speedup_vs_scalar.map_or("—".into(), |x| format!("{x:.2}×"))
            };
            let roof = b.roofline_fraction.map_or("—".into(), |f| format!("{:.0}%", f * 100.0));
            let runs: Vec<String> = b.runs.iter().map(|r| format!("{r:.0}")).collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {} | {} | {} |",
                b.tier,
                b.row,
                b.ran_as,
                b.tokens_per_sec,
                runs.join(", "),
                speed,
                roof
            );
        }
        let _ = writeln!(
            s,
            "\nCPUs under qemu are not timed: emulated timings are functional-only, never compared."
        );
    } else {
        let _ = writeln!(s, "{}\n", r.bench.note);
    }
    let _ = writeln!(s, "\n## Golden\n");
    for g in &r.golden {
        let model = match &g.model {
            Some(file) => format!("`{file}`"),
            None => format!("`ml gen {}`", g.gen_args.join(" ")),
        };
        let _ = writeln!(s, "- `{}`: {model}, prompt {:?}, {} steps", g.path, g.tokens, g.steps);
    }
    let _ = writeln!(s, "\n## Toolchain\n\n| tool | version |\n|---|---|");
    for (t, v) in &r.toolchain {
        let _ = writeln!(s, "| {} | {} |", md_escape(t), md_escape(v));
    }
    if !r.setup.is_empty() {
        let _ = writeln!(s, "\nSet-up: {}", r.setup.join("; "));
    }
    let _ = writeln!(
        s,
        "\nThe same data is in report.json (schema `{SCHEMA}`, documented in harness/README.md)."
    );
    s
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn html(r: &Report) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>legacy-ml matrix report</title>\n<style>\n\
body{{font-family:system-ui,sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse;margin-bottom:1.5em}}\n\
th,td{{border:1px solid #bbb;padding:4px 8px;font-size:13px;vertical-align:top}} th{{background:#eee}}\n\
.pass{{background:#c8f0c8}} .rejected{{background:#cfe3ff}} .fail{{background:#ffc4c4;font-weight:bold}}\n\
.compile-only{{background:#f1f1f1;color:#555}} .unavailable{{background:#ffe9b3}} .none{{color:#aaa}} .below-floor{{background:#e6dcf5}}\n\
.banner{{padding:8px 12px;font-size:18px;display:inline-block}} .placeholder{{border:2px dashed #999;padding:2em;color:#555;width:560px}}\n\
</style></head><body>\n<h1>legacy-ml matrix report</h1>\n"
    );
    let _ = writeln!(
        s,
        "<p class=\"banner {}\">{}</p><p>{} rows · mode <code>{}</code> · builder <code>{}</code> · {:.0} s · {}<br>Host: {} ({})</p>",
        if r.ok { "pass" } else { "fail" },
        if r.ok { "PASS: every row met its expectation" } else { "FAIL: some rows did not meet their expectation" },
        r.rows.len(),
        html_escape(&r.mode),
        html_escape(&r.builder),
        r.elapsed_secs,
        html_escape(&r.generated_utc),
        html_escape(&r.host.cpu),
        html_escape(&r.host.triple)
    );
    let _ = writeln!(
        s,
        "<h2>Compatibility grid</h2><p><span class=\"pass\">pass</span> kernel tests + golden e2e pass · \
         <span class=\"rejected\">rejected-cleanly</span> the guard exited 7 naming the missing feature · \
         <span class=\"fail\">FAIL (reason)</span> · <span class=\"compile-only\">compile-only</span> built/audited or not yet buildable, not run · \
         <span class=\"unavailable\">unavailable</span> a tool is missing · \
         <span class=\"below-floor\">below-floor</span> a CPU below the target's own floor: SIGILL in the C library's start-up, proven to come before any instruction of the binary. Hover a cell for the full reason; report.md has every detail.</p>"
    );
    for (target, rows, labels) in groups(r) {
        let _ = writeln!(
            s,
            "<h3>{}</h3>{}<table><tr><th>row</th><th>build + audit</th>",
            html_escape(&target),
            r.target_notes
                .get(&target)
                .map(|n| format!("<p>{}</p>", html_escape(n)))
                .unwrap_or_default()
        );
        for l in &labels {
            let _ = write!(s, "<th>{}</th>", html_escape(l));
        }
        let _ = writeln!(s, "</tr>");
        for row in rows {
            let _ = write!(
                s,
                "<tr><th title=\"{}\">{}</th>",
                html_escape(&row.note),
                html_escape(&row.name)
            );
            let ba = row.build_audit(48);
            let class = if ba.starts_with("FAIL") {
                "fail"
            } else if ba == "ok" {
                "pass"
            } else {
                "compile-only"
            };
            let _ = write!(
                s,
                "<td class=\"{class}\" title=\"{}\">{}</td>",
                html_escape(&format!(
                    "build: {}; audit: {}",
                    row.build.detail, row.audit_step.detail
                )),
                html_escape(&ba)
            );
            for l in &labels {
                match row.cells.iter().find(|c| &c.label == l) {
                    Some(c) => {
                        let class = match c.result {
                            CellResult::Pass => "pass",
                            CellResult::Rejected => "rejected",
                            CellResult::Fail => "fail",
                            CellResult::CompileOnly => "compile-only",
                            CellResult::Unavailable => "unavailable",
                            CellResult::BelowFloor => "below-floor",
                        };
                        let _ = write!(
                            s,
                            "<td class=\"{class}\" title=\"{}\">{}</td>",
                            html_escape(&format!("expect {}; ran as {}; {}", c.expect, c.ran_as, c.reason)),
                            html_escape(&c.grid_within(48))
                        );
                    }
                    None => s.push_str("<td class=\"none\">—</td>"),
                }
            }
            let _ = writeln!(s, "</tr>");
        }
        let _ = writeln!(s, "</table>");
    }
    s.push_str(&crate::icount::html(&r.rows));
    let _ = writeln!(s, "<h2>Throughput per tier</h2>");
    s.push_str(&bench_chart(&r.bench));
    let _ = writeln!(s, "<h2>Rows</h2><table><tr><th>row</th><th>status</th><th>build</th><th>target features (rustc --print cfg)</th><th>guard checks</th><th>audit</th></tr>");
    for row in &r.rows {
        let _ = writeln!(
            s,
            "<tr><th>{}</th><td>{:?}{}</td><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            html_escape(&row.name),
            row.status,
            if row.note.is_empty() {
                String::new()
            } else {
                format!("<br><small>{}</small>", html_escape(&row.note))
            },
            html_escape(row.build.status.as_str()),
            html_escape(&short(&row.build.detail, 200)),
            html_escape(&row.cfg_target_features.join(" ")),
            html_escape(&if row.guard_needs.is_empty() {
                "(nothing)".to_string()
            } else {
                row.guard_needs.join(" ")
            }),
            html_escape(&short(&row.audit_step.detail, 300))
        );
    }
    let _ = writeln!(s, "</table><h2>Toolchain</h2><table>");
    for (t, v) in &r.toolchain {
        let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", html_escape(t), html_escape(v));
    }
    let _ = writeln!(s, "</table><p>Full data: report.json (schema <code>{SCHEMA}</code>), details per cell: report.md.</p></body></html>");
    s
}

/// An SVG bar chart of native tok/s per tier, or an honest placeholder.
fn bench_chart(b: &BenchInfo) -> String {
    let native: Vec<&BenchResult> = b.results.iter().filter(|r| !r.emulated).collect();
    if !b.available || native.is_empty() {
        return format!(
            "<div class=\"placeholder\">No throughput chart: {}</div>\n",
            html_escape(&b.note)
        );
    }
    let max = native.iter().map(|r| r.tokens_per_sec).fold(0.0f64, f64::max).max(1e-9);
    let bar_h = 24;
    let mut s = format!(
        "<svg width=\"760\" height=\"{}\" role=\"img\" aria-label=\"tokens per second per tier\">\n",
        native.len() * (bar_h + 8) + 10
    );
    for (i, r) in native.iter().enumerate() {
        let y = 5 + i * (bar_h + 8);
        let w = (r.tokens_per_sec / max * 380.0).max(1.0);
        let _ = writeln!(
            s,
            "<text x=\"0\" y=\"{}\" font-size=\"13\">{}</text><rect x=\"170\" y=\"{y}\" width=\"{w:.0}\" height=\"{bar_h}\" fill=\"#4a8\"/><text x=\"{:.0}\" y=\"{}\" font-size=\"12\">{:.1} tok/s{}</text>",
            y + 17,
            html_escape(&format!("{} ({})", r.row, r.tier)),
            175.0 + w,
            y + 17,
            r.tokens_per_sec,
            r.speedup_vs_scalar.map_or(String::new(), |x| format!(" ({x:.2}× scalar)"))
        );
    }
    s.push_str("</svg>\n");
    s
}

pub fn write_all(dir: &Path, r: &Report) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(r)?)?;
    std::fs::write(dir.join("report.md"), markdown(r))?;
    std::fs::write(dir.join("report.html"), html(r))?;
    Ok(())
}

pub fn read(path: &Path) -> Result<Report> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let r: Report =
        serde_json::from_str(&text).with_context(|| format!("{} is not a {SCHEMA} report", path.display()))?;
    if r.schema != SCHEMA {
        anyhow::bail!("{}: schema {} is not {SCHEMA}", path.display(), r.schema);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_status_keeps_the_reports_strings() {
        let steps = [Step::ok("a", 1.5), Step::failed("b", 0.0), Step::skipped("c")];
        let json = serde_json::to_string(&steps).unwrap();
        assert_eq!(
            json,
            r#"[{"status":"ok","detail":"a","seconds":1.5},{"status":"failed","detail":"b","seconds":0.0},{"status":"skipped","detail":"c","seconds":0.0}]"#
        );
        let back: Vec<Step> = serde_json::from_str(&json).unwrap();
        assert_eq!(back[1].status, StepStatus::Failed);
        assert_eq!(format!("{} {}", back[0].status, back[2].status), "ok skipped");
        assert!(serde_json::from_str::<Step>(r#"{"status":"done","detail":"","seconds":0.0}"#).is_err());
    }

    fn cell(label: &str, result: CellResult, reason: &str) -> CellReport {
        CellReport {
            cpu: label.into(),
            label: label.into(),
            ran_as: label.into(),
            runner: String::new(),
            expect: "pass".into(),
            result,
            reason: reason.into(),
            detected_features: None,
            kernel_tests: vec![],
            e2e: vec![],
            guard: None,
            seconds: 0.0,
            icount: vec![],
        }
    }

    pub fn sample() -> Report {
        let row = RowReport {
            name: "avx2".into(),
            tier: "avx2".into(),
            target: "x86_64-unknown-linux-gnu".into(),
            cargo_features: vec!["isa-avx2".into()],
            rustflags: vec![],
            status: RowStatus::Failed,
            note: String::new(),
            build: Step::ok("built", 1.0),
            tests_build: Step::ok("9 binaries", 1.0),
            test_binaries: vec![],
            cfg_target_features: vec!["sse2".into()],
            guard_needs: vec!["avx2".into()],
            audit_step: Step::ok("clean", 0.1),
            audit: None,
            bench: None,
            cells: vec![
                cell("native", CellResult::Pass, ""),
                cell("qemu:Nehalem", CellResult::Rejected, ""),
                cell("qemu:Haswell", CellResult::Fail, "killed by SIGILL | x"),
            ],
        };
        Report {
            schema: SCHEMA.into(),
            generated_utc: utc_now(),
            mode: "full".into(),
            builder: "cargo".into(),
            ok: false,
            elapsed_secs: 1.0,
            host: HostInfo {
                arch: "x86_64".into(),
                triple: "x86_64-unknown-linux-gnu".into(),
                cpu: "test".into(),
                features: vec![],
            },
            toolchain: vec![("rustc".into(), "rustc 1.95.0".into())],
            setup: vec![],
            golden: vec![],
            rows: vec![row],
            bench: BenchInfo {
                available: false,
                note: "no ml bench yet".into(),
                results: vec![],
            },
            target_notes: Default::default(),
        }
    }

    #[test]
    fn a_target_note_heads_its_table() {
        let mut r = sample();
        r.target_notes.insert(
            "x86_64-unknown-linux-gnu".into(),
            "`native` ran under Wine | stand-in".into(),
        );
        let md = grid_markdown(&r);
        assert!(
            md.contains("### x86_64-unknown-linux-gnu\n\n`native` ran under Wine \\| stand-in\n"),
            "{md}"
        );
        assert!(html(&r).contains("<p>`native` ran under Wine | stand-in</p>"));
    }

    #[test]
    fn grid_shows_every_cell_state() {
        let md = markdown(&sample());
        assert!(
            md.contains("| row | build + audit | native | qemu:Nehalem | qemu:Haswell |"),
            "{md}"
        );
        assert!(
            md.contains("| avx2 | ok | pass | rejected-cleanly | FAIL (killed by SIGILL \\| x) |"),
            "{md}"
        );
        assert!(md.contains("FAIL: some rows"));
        let h = html(&sample());
        assert!(h.contains("class=\"fail\""));
        assert!(h.contains("No throughput chart: no ml bench yet"));
    }

    #[test]
    fn json_round_trips() {
        let r = sample();
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.rows[0].cells[2].result, CellResult::Fail);
    }

    #[test]
    fn utc_format() {
        let t = utc_now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z'));
    }
}
