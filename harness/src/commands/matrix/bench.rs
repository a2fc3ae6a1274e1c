//! Stage 4: decode speed. `stage_row` keeps the `ml` of each row that
//! passed on the host CPU; after the last row `bench_rounds` times them all
//! with `ml bench --json` in interleaved rounds (nothing else of the harness
//! runs meanwhile; emulated CPUs are never timed) and keeps each row's
//! median run; `bench_info` gathers the results for the report with each
//! one's speedup over the scalar row of its target, or says why there are
//! none.

use super::prepare::{Ctx, BENCH_GEN_ARGS};
use super::row::RowPlan;
use crate::builder::BuilderKind;
use crate::config::Expect;
use crate::outcome;
use crate::report::{BenchInfo, BenchResult, RowReport};
use crate::runner::Runner;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// Interleaved rounds of the decode bench: each round runs every staged
/// row once, so a noisy spell of the shared host hits every row alike, and
/// a row's figure is its median run (one slow run cannot invert two tiers'
/// order, as a single run per row did: avx512vnni 1058 against avx2 1368
/// tok/s in one report, the other way round when taken interleaved).
pub const BENCH_ROUNDS: usize = 3;

/// Where a row's `ml` waits for the rounds: its target dir goes with the
/// row, the rounds run after the last one.
fn staged_ml(ctx: &Ctx, row: &str) -> PathBuf {
    ctx.root.join("target/matrix/_bench").join(row).join("ml")
}

/// Forgets the binaries a previous (perhaps interrupted) run staged.
pub fn clear_staged(ctx: &Ctx) {
    let _ = std::fs::remove_dir_all(ctx.root.join("target/matrix/_bench"));
}

/// Keeps the row's `ml` for the decode bench rounds (`bench_rounds`), for a
/// row that passed on the host CPU; nothing in --quick mode, under `cross`
/// or Wine (whose timings would include Wine), or without a bench model.
pub fn stage_row(ctx: &Ctx, plan: &RowPlan, ml: &Path) {
    let row = plan.row;
    if ctx.quick || ctx.kind == BuilderKind::Cross || !ctx.bench_model().exists() {
        return;
    }
    let native_pass = row.cpus.iter().any(|c| c.cpu == "native" && c.expect == Expect::Pass);
    if !native_pass || row.compile_only.is_some() || plan.under_wine {
        return;
    }
    let to = staged_ml(ctx, &row.name);
    let copied = to
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::copy(ml, &to));
    if let Err(e) = copied {
        ctx.progress
            .done(&row.name, "ml bench", 0.0, &format!("not staged: {e}"));
    }
}

/// One `ml bench --json` decode of the bench model: (tok/s, fraction of
/// the roofline), or None when the run gave no data.
fn bench_once(sh: &Shell, ctx: &Ctx, row: &str, ml: &Path) -> Option<(f64, Option<f64>)> {
    let args: Vec<String> = [
        "bench",
        "--json",
        "--no-kernels",
        "--probe-mib",
        "64",
        "--seconds",
        "0.3",
        "-n",
        "64",
        // The report reads the roofline decode; one short ppN and one run
        // keep the llama-bench table's cost small.
        "-p",
        "16",
        "-r",
        "1",
        "--model",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([ctx.bench_model().display().to_string()])
    .collect();
    let out = Runner::Native
        .run(sh, ml, &args, &ctx.run_env(&Runner::Native), ctx.timeout())
        .ok()?;
    if outcome::check_ran(&out).is_err() {
        ctx.progress
            .done(row, "ml bench", out.seconds, &format!("no data: {}", out.describe()));
        return None;
    }
    let json: serde_json::Value = serde_json::from_str(out.stdout.trim()).ok()?;
    let tps = json["model"]["decode_tok_per_s"].as_f64()?;
    Some((tps, json["model"]["roofline_fraction"].as_f64()))
}

/// `BENCH_ROUNDS` rounds over every row that staged its `ml` (in row
/// order within a round), then each row's median run as its `bench`. The
/// staged binaries are removed afterwards.
pub fn bench_rounds(sh: &Shell, ctx: &Ctx, rows: &mut [RowReport]) {
    let staged: Vec<(usize, PathBuf)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (i, staged_ml(ctx, &r.name)))
        .filter(|(_, ml)| ml.exists())
        .collect();
    let mut runs: Vec<Vec<(f64, Option<f64>)>> = vec![Vec::new(); staged.len()];
    for round in 1..=BENCH_ROUNDS {
        for ((i, ml), runs) in staged.iter().zip(&mut runs) {
            let name = &rows[*i].name;
            ctx.progress.step(
                name,
                &format!("ml bench (native, decode), round {round}/{BENCH_ROUNDS}"),
            );
            let t = std::time::Instant::now();
            if let Some(run) = bench_once(sh, ctx, name, ml) {
                ctx.progress.done(
                    name,
                    &format!("ml bench {round}/{BENCH_ROUNDS}"),
                    t.elapsed().as_secs_f64(),
                    &format!("{:.1} tok/s", run.0),
                );
                runs.push(run);
            }
        }
    }
    for ((i, _), runs) in staged.iter().zip(runs) {
        let row = &mut rows[*i];
        if let Some((tps, roofline_fraction)) = median_run(&runs) {
            row.bench = Some(BenchResult {
                tier: row.tier.clone(),
                row: row.name.clone(),
                ran_as: "native".into(),
                tokens_per_sec: tps,
                speedup_vs_scalar: None,
                emulated: false,
                target: row.target.clone(),
                roofline_fraction,
                runs: runs.iter().map(|r| r.0).collect(),
            });
        }
    }
    clear_staged(ctx);
}

/// The run with the median tok/s (of an even count, the lower middle one),
/// with its own roofline fraction; None without runs.
fn median_run(runs: &[(f64, Option<f64>)]) -> Option<(f64, Option<f64>)> {
    let mut sorted = runs.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    sorted.get(sorted.len().saturating_sub(1) / 2).copied()
}

/// The rows' `ml bench` results with their speedup over the scalar row of
/// the same target; or why there are none (checked, not assumed).
pub fn bench_info(sh: &Shell, ctx: &Ctx, rows: &[RowReport]) -> BenchInfo {
    let mut results: Vec<BenchResult> = rows.iter().filter_map(|r| r.bench.clone()).collect();
    let scalar: Vec<(String, f64)> = results
        .iter()
        .filter(|b| b.tier == "scalar")
        .map(|b| (b.target.clone(), b.tokens_per_sec))
        .collect();
    for b in &mut results {
        b.speedup_vs_scalar = scalar
            .iter()
            .find(|(t, _)| *t == b.target)
            .map(|(_, s)| b.tokens_per_sec / s);
    }
    if !results.is_empty() {
        return BenchInfo {
            available: true,
            note: format!(
                "`ml bench --json --no-kernels` decode speed of a stories15M-shaped Q8_0 model (`ml gen {}`), native CPU only, after the last row: \
                 {BENCH_ROUNDS} rounds, each running every row once, and each row's median run (the runs beside it) on this shared 2-core machine \
                 (expect single runs to swing by tens of percent); timings under qemu are functional-only and are not taken.",
                BENCH_GEN_ARGS.join(" ")
            ),
            results,
        };
    }
    let ml = ctx.gen_ml_path();
    let exists = ml.exists()
        && cmd!(sh, "{ml} bench --help")
            .quiet()
            .ignore_stdout()
            .ignore_stderr()
            .run()
            .is_ok();
    BenchInfo {
        available: false,
        note: if ctx.quick {
            "no benchmark in --quick mode.".into()
        } else if exists {
            "no ml bench data: no row ran `ml bench` natively (none expects pass on the native CPU, or it failed)."
                .into()
        } else {
            "no ml bench yet: the runtime has no `ml bench` command, so there is no throughput data (timings under qemu would be functional-only anyway).".into()
        },
        results: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::median_run;

    #[test]
    fn a_rows_figure_is_its_median_run_with_that_runs_roofline() {
        assert_eq!(median_run(&[]), None);
        assert_eq!(median_run(&[(5.0, None)]), Some((5.0, None)));
        // One slow run among three does not move the figure.
        let runs = [(1368.0, Some(0.5)), (612.0, Some(0.2)), (1401.0, Some(0.6))];
        assert_eq!(median_run(&runs), Some((1368.0, Some(0.5))));
        // Of an even count, the lower middle run.
        assert_eq!(
            median_run(&[(4.0, None), (1.0, None), (3.0, None), (2.0, None)]),
            Some((2.0, None))
        );
    }
}
