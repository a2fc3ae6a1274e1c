//! Cost under emulation: guest instructions per decoded token, counted by
//! the TCG plugin `qemu/plugins/icount.c` (built here with the host's C
//! compiler) on every `pass` cell that runs under qemu.
//!
//! Timings under qemu mean nothing; the number of guest instructions a
//! build executes is exact and the same on every run (one thread, the same
//! binary and inputs). Per decoded token is the difference between two
//! runs of `ml run` that differ only in the number of tokens they generate,
//! divided by that difference: loading, the prompt and exit cancel out, and
//! what remains is the average decode step over the positions between the
//! two lengths (attention grows with the position, so the figure belongs
//! to those lengths).

use crate::outcome::RunOutput;
use crate::report::{CellResult, RowReport};
use crate::runner::Runner;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use xshell::{cmd, Shell};

/// The two run lengths (tokens generated after a one-token prompt).
pub const SHORT_RUN: u32 = 8;
pub const LONG_RUN: u32 = 24;
/// Prompt lengths whose difference gives the instructions per prompt
/// token: 32 more tokens, one full chunk of `ml run`'s default batch, fed
/// through the batched prefill (issue 15), each run generating one token.
pub const SHORT_PROMPT: u32 = 8;
pub const LONG_PROMPT: u32 = 40;
/// Functions kept per measurement in the report.
pub const TOP_FUNCTIONS: usize = 5;

/// Builds the plugin into `out_dir` with the host's `cc` (or `gcc`).
pub fn build_plugin(sh: &Shell, root: &Path, out_dir: &Path) -> Result<PathBuf> {
    let src = root.join("qemu/plugins/icount.c");
    std::fs::create_dir_all(out_dir)?;
    let lib = out_dir.join("libicount.so");
    let compiler = ["cc", "gcc"]
        .into_iter()
        .find(|c| {
            cmd!(sh, "{c} --version")
                .quiet()
                .ignore_stdout()
                .ignore_stderr()
                .run()
                .is_ok()
        })
        .context("no C compiler (cc or gcc) to build qemu/plugins/icount.c")?;
    let out = cmd!(sh, "{compiler} -shared -fPIC -O2 -Wall -o {lib} {src}")
        .quiet()
        .ignore_status()
        .output()?;
    if !out.status.success() {
        bail!(
            "{compiler} could not build {}: {}",
            src.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(lib)
}

/// The plugin's output: the total and each function's share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    pub total: u64,
    /// Demangled names without their hash, summed over same-named symbols,
    /// largest first.
    pub functions: Vec<(String, u64)>,
}

/// Parses the plugin's `outfile`: `total N`, then `N\tsymbol` lines.
pub fn parse(text: &str) -> Result<Counts> {
    let mut lines = text.lines();
    let total = lines
        .next()
        .and_then(|l| l.strip_prefix("total "))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .context("the plugin's output does not start with `total N`")?;
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    let mut sum = 0u64;
    for l in lines {
        let (n, sym) = l
            .split_once('\t')
            .with_context(|| format!("plugin output line without a tab: {l:?}"))?;
        let n: u64 = n.parse().with_context(|| format!("bad count in {l:?}"))?;
        sum += n;
        *by_name.entry(demangle(sym)).or_default() += n;
    }
    if sum != total {
        bail!("the plugin's functions add up to {sum}, not its total {total}");
    }
    let mut functions: Vec<(String, u64)> = by_name.into_iter().collect();
    functions.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(Counts { total, functions })
}

/// A Rust symbol's readable path, without the hash; C names stay as they are.
pub fn demangle(symbol: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(symbol))
}

/// Runs `exe args` on a qemu `runner` with the plugin and returns its counts.
///
/// qemu runs without address-space randomisation (`setarch -R`): where the
/// guest's stack and heap land decides the alignment of its buffers, and
/// memcpy and friends take paths of different lengths by alignment (seen:
/// totals 8 instructions apart between two runs of the same `ml run`).
pub fn run_counted(
    runner: &Runner,
    plugin: &Path,
    exe: &Path,
    args: &[String],
    out_file: &Path,
    timeout_secs: u64,
) -> Result<(Counts, RunOutput)> {
    let mut argv = runner.prefix();
    if !matches!(runner, Runner::Qemu { .. }) || argv.is_empty() {
        bail!("instruction counts need a qemu runner");
    }
    let _ = std::fs::remove_file(out_file);
    argv.insert(1, "-plugin".into());
    argv.insert(2, format!("{},outfile={}", plugin.display(), out_file.display()));
    let start = std::time::Instant::now();
    let out = Command::new("timeout")
        .args(["-k", "10", &timeout_secs.to_string()])
        .args(["setarch", std::env::consts::ARCH, "-R"])
        .args(&argv)
        .arg(exe)
        .args(args)
        .output()
        .with_context(|| format!("run {} {}", argv.join(" "), exe.display()))?;
    let run = RunOutput {
        code: out.status.code(),
        signal: crate::builder::exit_signal(&out.status),
        timed_out: out.status.code() == Some(124),
        seconds: start.elapsed().as_secs_f64(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    crate::outcome::check_ran(&run).map_err(|e| anyhow::anyhow!("{} {}: {e}", argv.join(" "), exe.display()))?;
    let text =
        std::fs::read_to_string(out_file).with_context(|| format!("the plugin wrote no {}", out_file.display()))?;
    Ok((parse(&text)?, run))
}

/// One model's figure on one cell.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenCost {
    /// The golden model's name (e.g. `logits_q8_0`).
    pub model: String,
    /// Guest instructions per decoded token.
    pub per_token: f64,
    /// Guest instructions per prompt token, through the batched prefill
    /// (`ml run` with `LONG_PROMPT` − `SHORT_PROMPT` prompt tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_prompt_token: Option<f64>,
    /// Totals of the short and the long run.
    pub short_total: u64,
    pub long_total: u64,
    /// The functions with the most instructions per token (their difference
    /// between the runs, divided as the total is).
    pub top: Vec<(String, f64)>,
    /// Whether a second short run gave the same total (checked on the
    /// first model of each cell; a cell whose count does not repeat fails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated_exactly: Option<bool>,
    /// Wall time of this model's counted runs (the repeat included): what
    /// counting adds to the matrix.
    #[serde(default)]
    pub seconds: f64,
}

/// Per decoded token from a short and a long run's counts.
pub fn token_cost(model: &str, short: &Counts, long: &Counts) -> TokenCost {
    let tokens = f64::from(LONG_RUN - SHORT_RUN);
    let short_of: BTreeMap<&str, u64> = short.functions.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    let mut top: Vec<(String, f64)> = long
        .functions
        .iter()
        .map(|(n, c)| {
            let before = short_of.get(n.as_str()).copied().unwrap_or(0);
            (n.clone(), (*c as f64 - before as f64) / tokens)
        })
        .collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(TOP_FUNCTIONS);
    TokenCost {
        model: model.to_string(),
        per_token: (long.total as f64 - short.total as f64) / tokens,
        short_total: short.total,
        long_total: long.total,
        top,
        per_prompt_token: None,
        repeated_exactly: None,
        seconds: 0.0,
    }
}

/// Per prompt token from the totals of the short and the long prompt.
pub fn prompt_token_cost(short: &Counts, long: &Counts) -> f64 {
    (long.total as f64 - short.total as f64) / f64::from(LONG_PROMPT - SHORT_PROMPT)
}

/// `ml run MODEL --tokens <n ids> -n 1 --temp 0 --seed 1 --threads 1
/// --no-stats`: the prompt through the batched prefill at `ml run`'s
/// default batch, then one greedy token. The ids cycle through the golden
/// models' 256-token vocabulary without repeating neighbours.
pub fn prompt_args(model: &Path, prompt_tokens: u32) -> Vec<String> {
    let ids: Vec<String> = (0..prompt_tokens)
        .map(|i| ((37 * i + 11) % 255 + 1).to_string())
        .collect();
    let mut args = run_args(model, 1);
    args[3] = ids.join(",");
    args
}

/// `ml run MODEL --tokens 1 -n N --temp 0 --seed 1 --threads 1 --no-stats`:
/// greedy, one thread, no clock-derived seed and no timing line, whose
/// formatting costs a number of instructions that varies with the times.
pub fn run_args(model: &Path, tokens: u32) -> Vec<String> {
    vec![
        "run".into(),
        model.display().to_string(),
        "--tokens".into(),
        "1".into(),
        "-n".into(),
        tokens.to_string(),
        "--temp".into(),
        "0".into(),
        "--seed".into(),
        "1".into(),
        "--threads".into(),
        "1".into(),
        "--no-stats".into(),
    ]
}

/// Each tier builds on the one before it, per architecture family: an
/// accelerated tier must cost fewer instructions per token than the
/// nearest tier below it that ran on the same CPU.
const CHAINS: &[&[&str]] = &[
    &["scalar", "sse2", "sse41", "avx2"],
    &["scalar", "neon", "neon-dotprod", "sve"],
];

/// A tier that costs as much as or more than the one below it on a CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderBreak {
    pub row: String,
    pub message: String,
}

/// (target, cpu label, model).
type CellKey = (String, String, String);

/// Checks the per-tier ordering over the plain rows (no extra features):
/// for every target, CPU and model, each tier with a figure against the
/// nearest lower tier with one.
pub fn ordering(rows: &[RowReport]) -> Vec<OrderBreak> {
    let mut breaks = Vec::new();
    let mut seen: BTreeMap<CellKey, BTreeMap<String, (String, f64)>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.cargo_features.iter().all(|f| f.starts_with("isa-")))
    {
        for c in r.cells.iter().filter(|c| c.result == CellResult::Pass) {
            for t in &c.icount {
                seen.entry((r.target.clone(), c.label.clone(), t.model.clone()))
                    .or_default()
                    .insert(r.tier.clone(), (r.name.clone(), t.per_token));
            }
        }
    }
    for ((target, cpu, model), tiers) in &seen {
        for chain in CHAINS {
            let present: Vec<(&str, &(String, f64))> =
                chain.iter().filter_map(|t| tiers.get(*t).map(|v| (*t, v))).collect();
            for pair in present.windows(2) {
                let (lower, (_, below)) = pair[0];
                let (upper, (row, cost)) = pair[1];
                if cost >= below {
                    breaks.push(OrderBreak {
                        row: row.clone(),
                        message: format!(
                            "{upper} executes {} instructions per token on {target} {cpu} ({model}), \
                             {:+.1}% against {lower}'s {}",
                            mega(*cost),
                            (cost / below - 1.0) * 100.0,
                            mega(*below)
                        ),
                    });
                }
            }
        }
    }
    breaks
}

/// `3.70 M`, `812 k`.
pub fn mega(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.2} M", n / 1e6)
    } else {
        format!("{:.0} k", n / 1e3)
    }
}

/// Figures of one target: (row, tier, cpu label → costs), in report order.
type TargetTable<'a> = (
    String,
    Vec<String>,
    Vec<(&'a RowReport, BTreeMap<String, &'a [TokenCost]>)>,
);

fn tables(rows: &[RowReport]) -> Vec<TargetTable<'_>> {
    let mut out: Vec<TargetTable> = Vec::new();
    for r in rows {
        let cells: BTreeMap<String, &[TokenCost]> = r
            .cells
            .iter()
            .filter(|c| !c.icount.is_empty())
            .map(|c| (c.label.clone(), c.icount.as_slice()))
            .collect();
        if cells.is_empty() {
            continue;
        }
        let i = match out.iter().position(|(t, _, _)| *t == r.target) {
            Some(i) => i,
            None => {
                out.push((r.target.clone(), Vec::new(), Vec::new()));
                out.len() - 1
            }
        };
        for c in r.cells.iter().filter(|c| cells.contains_key(&c.label)) {
            if !out[i].1.contains(&c.label) {
                out[i].1.push(c.label.clone());
            }
        }
        out[i].2.push((r, cells));
    }
    out
}

/// The scalar row's figure for `model` on `cpu` of a target, if any.
fn scalar_cost(rows: &[(&RowReport, BTreeMap<String, &[TokenCost]>)], cpu: &str, model: &str) -> Option<TokenCost> {
    rows.iter()
        .filter(|(r, _)| r.tier == "scalar" && r.cargo_features.is_empty())
        .find_map(|(_, cells)| cells.get(cpu)?.iter().find(|t| t.model == model).cloned())
}

fn cost_text(costs: &[TokenCost], scalar: impl Fn(&str) -> Option<TokenCost>) -> String {
    let ratio = |scalar: Option<f64>, this: f64| {
        scalar
            .filter(|s| *s > 0.0 && this > 0.0)
            .map_or(String::new(), |s| format!(" ({:.2}×)", s / this))
    };
    costs
        .iter()
        .map(|t| {
            let base = scalar(&t.model);
            let decode = ratio(base.as_ref().map(|b| b.per_token), t.per_token);
            let prompt = t.per_prompt_token.map_or(String::new(), |p| {
                let r = ratio(base.as_ref().and_then(|b| b.per_prompt_token), p);
                format!(", prompt {}{r}", mega(p))
            });
            format!("{} {}{decode}{prompt}", short_model(&t.model), mega(t.per_token))
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// `logits_q8_0` → `Q8_0`.
fn short_model(name: &str) -> String {
    name.strip_prefix("logits_").unwrap_or(name).to_ascii_uppercase()
}

/// The cells' time spent in counted runs, summed (cells of a row run in
/// parallel, so the matrix's wall time grows by less).
pub fn counting_seconds(rows: &[RowReport]) -> f64 {
    rows.iter()
        .flat_map(|r| &r.cells)
        .flat_map(|c| &c.icount)
        .map(|t| t.seconds)
        .sum()
}

/// The report's section: per target a table tier × CPU of instructions per
/// decoded token with the scalar build's multiple on the same CPU, then
/// each cell's five costliest functions.
pub fn markdown(rows: &[RowReport]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "## Instructions per token (qemu)\n");
    let t = tables(rows);
    if t.is_empty() {
        let _ = writeln!(s, "No figures: no pass cell ran under qemu with the counting plugin.\n");
        return s;
    }
    let _ = writeln!(
        s,
        "Guest instructions per decoded token, counted by `qemu/plugins/icount.c` on one thread: \
         (`ml run -n {LONG_RUN}` − `-n {SHORT_RUN}`) / {} on the random-weight golden models; \
         then per prompt token, (a {LONG_PROMPT}-token prompt − a {SHORT_PROMPT}-token one) / {}, \
         fed through the batched prefill in chunks of 32; \
         in brackets the scalar build's count on the same CPU divided by this one. Exact and \
         repeatable (every cell's first model is run twice and must count the same), but not a \
         speed: see README, \"Cost under emulation\". Counting took {:.0} s of the cells' time.\n",
        LONG_RUN - SHORT_RUN,
        LONG_PROMPT - SHORT_PROMPT,
        counting_seconds(rows)
    );
    for (target, cpus, trows) in &t {
        let _ = writeln!(s, "### {target}\n");
        let _ = writeln!(s, "| row | {} |", cpus.join(" | "));
        let _ = writeln!(s, "|---|{}", "---|".repeat(cpus.len()));
        for (r, cells) in trows {
            let cols: Vec<String> = cpus
                .iter()
                .map(|cpu| match cells.get(cpu) {
                    Some(costs) => cost_text(costs, |m| scalar_cost(trows, cpu, m)),
                    None => "—".into(),
                })
                .collect();
            let _ = writeln!(s, "| {} | {} |", r.name, cols.join(" | "));
        }
        let _ = writeln!(s, "\nCostliest functions per cell (instructions per token):\n");
        for (r, cells) in trows {
            for (cpu, costs) in cells {
                for c in costs.iter() {
                    let top: Vec<String> = c.top.iter().map(|(f, n)| format!("`{f}` {}", mega(*n))).collect();
                    let _ = writeln!(s, "- {} {} {}: {}", r.name, cpu, short_model(&c.model), top.join(", "));
                }
            }
        }
        s.push('\n');
    }
    s
}

/// The HTML section: an SVG bar chart per target and CPU (one bar per row
/// and model, log-free: lengths proportional to the count).
pub fn html(rows: &[RowReport]) -> String {
    use std::fmt::Write;
    let esc = |x: &str| x.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let mut s = String::from("<h2>Instructions per decoded token (qemu)</h2>\n");
    let t = tables(rows);
    if t.is_empty() {
        s.push_str(
            "<div class=\"placeholder\">No figures: no pass cell ran under qemu with the counting plugin.</div>\n",
        );
        return s;
    }
    for (target, cpus, trows) in &t {
        for cpu in cpus {
            let bars: Vec<(String, f64)> = trows
                .iter()
                .filter_map(|(r, cells)| cells.get(cpu).map(|c| (r, c)))
                .flat_map(|(r, costs)| {
                    costs
                        .iter()
                        .map(move |c| (format!("{} {}", r.name, short_model(&c.model)), c.per_token))
                })
                .collect();
            let max = bars.iter().map(|b| b.1).fold(1.0f64, f64::max);
            let _ = writeln!(
                s,
                "<h3>{} {}</h3><svg width=\"760\" height=\"{}\" role=\"img\" aria-label=\"instructions per token\">",
                esc(target),
                esc(cpu),
                bars.len() * 22 + 8
            );
            for (i, (name, n)) in bars.iter().enumerate() {
                let y = 4 + i * 22;
                let w = (n / max * 400.0).max(1.0);
                let _ = writeln!(
                    s,
                    "<text x=\"0\" y=\"{}\" font-size=\"12\">{}</text><rect x=\"230\" y=\"{y}\" width=\"{w:.0}\" height=\"16\" fill=\"#68a\"/><text x=\"{:.0}\" y=\"{}\" font-size=\"12\">{}</text>",
                    y + 13,
                    esc(name),
                    235.0 + w,
                    y + 13,
                    mega(*n)
                );
            }
            s.push_str("</svg>\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_totals_and_sums_functions_by_demangled_name() {
        let text = "total 110\n60\t_ZN9legacy_ml7kernels6scalar9matvec_q817h2485e1be71d9cfd6E\n\
                    30\t_ZN9legacy_ml7kernels6scalar9matvec_q817h0000000000000000E\n20\t?\n";
        let c = parse(text).unwrap();
        assert_eq!(c.total, 110);
        assert_eq!(
            c.functions,
            vec![
                ("legacy_ml::kernels::scalar::matvec_q8".to_string(), 90),
                ("?".to_string(), 20)
            ]
        );
        assert!(
            parse("total 5\n4\tmain\n").is_err(),
            "a sum that misses the total is an error"
        );
        assert!(parse("5\tmain\n").is_err());
    }

    #[test]
    fn per_token_is_the_difference_over_the_extra_tokens() {
        let short = Counts {
            total: 1_000,
            functions: vec![("load".into(), 900), ("matvec".into(), 100)],
        };
        let long = Counts {
            total: 1_000 + 16 * 50,
            functions: vec![("load".into(), 900), ("matvec".into(), 100 + 16 * 50)],
        };
        let t = token_cost("m", &short, &long);
        assert_eq!(t.per_token, 50.0);
        assert_eq!(t.top[0], ("matvec".to_string(), 50.0));
        assert_eq!(t.top[1], ("load".to_string(), 0.0));
    }

    fn row(name: &str, tier: &str, features: &[&str], cells: &[(&str, f64)]) -> RowReport {
        let mut r: RowReport = serde_json::from_value(serde_json::json!({
            "name": name, "tier": tier, "target": "aarch64-unknown-linux-gnu",
            "cargo_features": features, "rustflags": [], "status": "ok", "note": "",
            "build": {"status": "ok", "detail": "", "seconds": 0.0},
            "tests_build": {"status": "ok", "detail": "", "seconds": 0.0},
            "test_binaries": [], "cfg_target_features": [], "guard_needs": [],
            "audit_step": {"status": "ok", "detail": "", "seconds": 0.0}, "audit": null, "cells": []
        }))
        .unwrap();
        for (cpu, cost) in cells {
            let mut c: crate::report::CellReport = serde_json::from_value(serde_json::json!({
                "cpu": cpu, "label": format!("qemu:{cpu}"), "ran_as": "", "runner": "", "expect": "pass",
                "result": "pass", "reason": "", "detected_features": null, "kernel_tests": [], "e2e": [],
                "guard": null, "seconds": 0.0
            }))
            .unwrap();
            c.icount = vec![TokenCost {
                model: "q8".into(),
                per_token: *cost,
                per_prompt_token: Some(cost / 4.0),
                short_total: 0,
                long_total: 0,
                top: vec![],
                repeated_exactly: None,
                seconds: 0.0,
            }];
            r.cells.push(c);
        }
        r
    }

    #[test]
    fn each_tier_must_cost_less_than_the_nearest_one_below_on_the_same_cpu() {
        let rows = vec![
            row("scalar", "scalar", &[], &[("max", 10.0e6), ("a64fx", 10.0e6)]),
            row("neon", "neon", &["isa-neon"], &[("max", 2.0e6), ("a64fx", 2.0e6)]),
            row("dotprod", "neon-dotprod", &["isa-neon-dotprod"], &[("max", 1.6e6)]),
            row("sve", "sve", &["isa-sve"], &[("max", 3.7e6), ("a64fx", 1.9e6)]),
            // Rows with extra features are not part of the chain.
            row("neon-threads", "neon", &["isa-neon", "threads"], &[("max", 99.0e6)]),
        ];
        let b = ordering(&rows);
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].row, "sve");
        assert!(
            b[0].message.contains("3.70 M") && b[0].message.contains("neon-dotprod's 1.60 M"),
            "{}",
            b[0].message
        );
        assert!(b[0].message.contains("+131.2%"), "{}", b[0].message);
        // On a64fx dotprod did not run: sve is compared with neon, and wins.
    }

    #[test]
    fn prompt_runs_differ_only_in_their_prompt_and_cost_is_per_extra_token() {
        let m = Path::new("m.mlb");
        let (short, long) = (prompt_args(m, SHORT_PROMPT), prompt_args(m, LONG_PROMPT));
        let ids = |a: &[String]| a[3].split(',').map(|t| t.parse::<u32>().unwrap()).collect::<Vec<_>>();
        assert_eq!(ids(&short).len(), SHORT_PROMPT as usize);
        assert_eq!(ids(&long).len(), LONG_PROMPT as usize);
        assert_eq!(
            ids(&long)[..SHORT_PROMPT as usize],
            ids(&short)[..],
            "the short prompt is the long one's start"
        );
        assert!(ids(&long).iter().all(|&t| (1..256).contains(&t)));
        let (mut a, mut b) = (short.clone(), long.clone());
        a.remove(3);
        b.remove(3);
        assert_eq!(a, b);
        assert_eq!(&short[4..6], ["-n", "1"]);
        let counts = |total| Counts {
            total,
            functions: vec![],
        };
        let per = prompt_token_cost(&counts(1_000), &counts(1_000 + 32 * 7));
        assert_eq!(per, 7.0);
    }

    #[test]
    fn the_table_gives_prompt_and_decode_with_their_scalar_multiples() {
        let rows = vec![
            row("scalar", "scalar", &[], &[("max", 8.0e6)]),
            row("neon", "neon", &["isa-neon"], &[("max", 2.0e6)]),
        ];
        let md = markdown(&rows);
        assert!(md.contains("Q8 2.00 M (4.00×), prompt 500 k (4.00×)"), "{md}");
    }
}
