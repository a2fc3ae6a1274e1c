//! Stage 4: decode speed. `bench_row` times `ml bench --json` on the host
//! CPU after a row's cells (so nothing else of the harness runs meanwhile;
//! emulated CPUs are never timed); `bench_info` gathers the rows' results
//! for the report with each one's speedup over the scalar row of its
//! target, or says why there are none.

use super::prepare::{Ctx, BENCH_GEN_ARGS};
use super::row::RowPlan;
use crate::builder::BuilderKind;
use crate::config::Expect;
use crate::outcome;
use crate::report::{BenchInfo, BenchResult, RowReport};
use crate::runner::Runner;
use std::path::Path;
use xshell::{cmd, Shell};

/// `ml bench --json` of the bench model on the host CPU, for a row that
/// passed there; None in --quick mode, under `cross` or Wine, or when the
/// run gave no data.
pub fn bench_row(sh: &Shell, ctx: &Ctx, plan: &RowPlan, ml: &Path) -> Option<BenchResult> {
    let row = plan.row;
    let model = ctx.bench_model();
    if ctx.quick || ctx.kind == BuilderKind::Cross || !model.exists() {
        return None;
    }
    let native_pass = row.cpus.iter().any(|c| c.cpu == "native" && c.expect == Expect::Pass);
    // Under Wine the CPU is the host's, but the row would time Wine too.
    if !native_pass || row.compile_only.is_some() || plan.under_wine {
        return None;
    }
    ctx.progress.step(&row.name, "ml bench (native, decode)");
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
    .chain([model.display().to_string()])
    .collect();
    let out = Runner::Native
        .run(sh, ml, &args, &ctx.run_env(&Runner::Native), ctx.timeout())
        .ok()?;
    if outcome::check_ran(&out).is_err() {
        ctx.progress.done(
            &row.name,
            "ml bench",
            out.seconds,
            &format!("no data: {}", out.describe()),
        );
        return None;
    }
    let json: serde_json::Value = serde_json::from_str(out.stdout.trim()).ok()?;
    let tps = json["model"]["decode_tok_per_s"].as_f64()?;
    ctx.progress
        .done(&row.name, "ml bench", out.seconds, &format!("{tps:.1} tok/s"));
    Some(BenchResult {
        tier: json["tier"].as_str().unwrap_or(&row.tier).to_string(),
        row: row.name.clone(),
        ran_as: "native".into(),
        tokens_per_sec: tps,
        speedup_vs_scalar: None,
        emulated: false,
        target: row.target.clone(),
        roofline_fraction: json["model"]["roofline_fraction"].as_f64(),
    })
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
                "`ml bench --json --no-kernels` decode speed of a stories15M-shaped Q8_0 model (`ml gen {}`), native CPU only, one row at a time, \
                 a single run on this shared 2-core machine (expect noise of tens of percent); timings under qemu are functional-only and are not taken.",
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
