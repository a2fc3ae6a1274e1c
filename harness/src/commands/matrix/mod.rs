//! `harness matrix`: every row of matrix.toml built, run on each of its CPUs,
//! compared with the golden, its guard exercised and its disassembly
//! audited; then report/report.{md,json,html}. Exit 0 only when every row
//! met its expectation.
//!
//! The stages, in the order a run meets them (read them in this order):
//! - here: matrix.toml loaded and the rows selected;
//! - `prepare`: what the rows share, made once: set-up (tools installed),
//!   the instruction-count plugin, the Wine prefix, the golden and bench
//!   models → a `Ctx`;
//! - `row`: each row planned once (arch, runners with their qemu `-cpu`
//!   argument, what the guard must check) → `ml` built → guard read →
//!   audit → test binaries built → its cells → its verdict;
//! - `cell`: one CPU of a row: `ml isa`, the golden or the guard's
//!   rejection, the kernel tests, the instruction count;
//! - `bench`: `ml bench` on the host CPU after a row's cells, and the
//!   speedups over scalar for the report;
//! - here again: the tiers' instruction ordering, then the report.

mod bench;
mod cell;
mod prepare;
mod row;

pub use prepare::{host_triple, root_dir, runtime_features};

use crate::builder::{BuilderKind, BuiltRow};
use crate::config::{Host, Matrix, Row};
use crate::icount;
use crate::isa;
use crate::progress::Progress;
use crate::report::{self, GoldenInfo, HostInfo, Report, RowStatus};
use anyhow::{bail, Result};
use std::path::PathBuf;
use xshell::Shell;

#[derive(clap::Args, Debug, Clone)]
pub struct MatrixArgs {
    /// Run only these rows (by name).
    #[arg(long, num_args = 1.., value_name = "ROW")]
    pub only: Vec<String>,
    /// Golden e2e + guard expectation (+ the static audit) only: no kernel
    /// test binaries are built or run.
    #[arg(long)]
    pub quick: bool,
    #[arg(long, value_enum, default_value_t = BuilderKind::Auto)]
    pub builder: BuilderKind,
    /// Do not install missing rustup targets or Debian packages.
    #[arg(long)]
    pub no_install: bool,
    /// Exit 0 even if rows are unavailable (a tool is missing).
    #[arg(long)]
    pub allow_unavailable: bool,
    /// CPUs of a row run in parallel.
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// The matrix file (relative to the repo root).
    #[arg(long, default_value = "matrix.toml")]
    pub matrix: PathBuf,
    /// Re-derive `native` pass/reject from this host's CPU (for CI runners
    /// that are not the reference machine); the report lists every change.
    #[arg(long)]
    pub native_from_host: bool,
    /// Where report.{md,json,html} go (relative to the repo root).
    #[arg(long, default_value = "report")]
    pub out: PathBuf,
    /// Keep every row's target dir under target/matrix. By default only the
    /// first built row per (triple, rustflags) is kept, as the seed of the
    /// others: a full matrix would otherwise leave ~1.2 GB per row behind.
    #[arg(long)]
    pub keep_target_dirs: bool,
}

pub fn run(args: MatrixArgs) -> Result<bool> {
    prepare::no_core_dumps();
    let progress = Progress::new();
    let root = root_dir();
    let sh = Shell::new()?;
    sh.change_dir(&root);
    let host = Host::detect();
    let (matrix, native_changes) = if args.native_from_host {
        Matrix::load_native_from_host(&root.join(&args.matrix), &host)?
    } else {
        (Matrix::load(&root.join(&args.matrix), &host)?, Vec::new())
    };
    let selected = select_rows(&matrix, &args.only)?;
    let (kind, builder_note) = args.builder.resolve(&sh);
    progress.step(
        "matrix",
        &format!(
            "{} rows, builder {builder_note}{}",
            selected.len(),
            if args.quick { ", quick" } else { "" }
        ),
    );

    let prepare::Prepared {
        mut ctx,
        needs,
        setup_actions,
        toolchain,
        target_notes,
    } = prepare::prepare(
        &sh,
        prepare::Inputs {
            root: &root,
            matrix: &matrix,
            host: &host,
            selected: &selected,
            kind,
            args: &args,
            native_changes: &native_changes,
            progress: &progress,
        },
    )?;

    bench::clear_staged(&ctx);
    let plans: Vec<row::RowPlan> = selected.iter().map(|r| row::plan(&ctx, r)).collect();
    let mut rows = Vec::new();
    // Rows built so far: the seeds of the later rows' target dirs.
    let mut built: Vec<BuiltRow> = Vec::new();
    if ctx.gold_error.is_none() {
        built.push(ctx.gen_row());
    }
    for (plan, needs) in plans.iter().zip(&needs) {
        if ctx.gold_error.is_some() {
            // E.g. the runtime did not compile a moment ago: try again.
            if let Ok(g) = prepare::golden_models(&sh, &ctx) {
                ctx.golds = g;
                ctx.gold_error = None;
                built.push(ctx.gen_row());
            }
        }
        let missing: Vec<&crate::setup::Need> = needs.iter().filter(|n| !n.present).collect();
        let report = if !missing.is_empty() {
            let why = missing.iter().map(|n| n.missing_line()).collect::<Vec<_>>().join("; ");
            progress.done(&plan.row.name, "set-up", 0.0, &format!("unavailable: {why}"));
            row::unavailable(plan, &why)
        } else {
            row::run(&sh, &ctx, plan, &mut built, args.keep_target_dirs)
        };
        progress.done(
            &plan.row.name,
            "row",
            0.0,
            &format!(
                "{:?}: {}",
                report.status,
                report
                    .cells
                    .iter()
                    .map(|c| format!("{}={}", c.label, c.grid()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        rows.push(report);
    }

    bench::bench_rounds(&sh, &ctx, &mut rows);

    // Each tier must cost fewer instructions per token than the one below.
    for order_break in icount::ordering(&rows) {
        let message = order_break.message;
        progress.done(
            &order_break.row,
            "instruction order",
            0.0,
            &format!("FAILED: {message}"),
        );
        if let Some(report) = rows.iter_mut().find(|r| r.name == order_break.row) {
            report.status = RowStatus::Failed;
            report.note = if report.note.is_empty() {
                message
            } else {
                format!("{}; {message}", report.note)
            };
        }
    }

    prepare::stop_wine(&ctx, &selected);

    let ok = rows.iter().all(|r| match r.status {
        RowStatus::Ok | RowStatus::CompileOnly => true,
        RowStatus::Unavailable => args.allow_unavailable,
        RowStatus::Failed => false,
    }) && ctx.gold_error.is_none();
    let matrix_report = Report {
        schema: report::SCHEMA.into(),
        generated_utc: report::utc_now(),
        mode: if args.quick { "quick".into() } else { "full".into() },
        builder: builder_note,
        ok,
        elapsed_secs: progress.elapsed(),
        host: HostInfo {
            arch: std::env::consts::ARCH.into(),
            triple: ctx.host_triple.clone(),
            cpu: isa::host_cpu_name(),
            features: host.features.clone(),
        },
        toolchain,
        setup: setup_actions,
        golden: golden_info(&ctx),
        bench: bench::bench_info(&sh, &ctx, &rows),
        rows,
        target_notes,
    };
    let out = root.join(&args.out);
    report::write_all(&out, &matrix_report)?;
    println!("{}", report::grid_markdown(&matrix_report));
    println!(
        "{} in {:.0}s (instruction counting: {:.0}s of cell time) — report: {}/report.md, report.json, report.html",
        if ok { "matrix PASSED" } else { "matrix FAILED" },
        matrix_report.elapsed_secs,
        crate::icount::counting_seconds(&matrix_report.rows),
        out.display()
    );
    if let Some(e) = &ctx.gold_error {
        println!("golden: {e}");
    }
    Ok(ok)
}

/// The rows `--only` names, in its order; all of them without it.
fn select_rows<'m>(matrix: &'m Matrix, only: &[String]) -> Result<Vec<&'m Row>> {
    if only.is_empty() {
        return Ok(matrix.rows.iter().collect());
    }
    let mut v = Vec::new();
    for name in only {
        match matrix.row(name) {
            Some(r) => v.push(r),
            None => {
                let names: Vec<&str> = matrix.rows.iter().map(|r| r.name.as_str()).collect();
                bail!("--only {name}: no such row (rows: {})", names.join(", "));
            }
        }
    }
    Ok(v)
}

fn golden_info(ctx: &prepare::Ctx) -> Vec<GoldenInfo> {
    ctx.golds
        .iter()
        .map(|g| GoldenInfo {
            name: g.name.clone(),
            path: g.path.clone(),
            gen_args: g.logits.gen_args.clone(),
            model: g.logits.model.clone(),
            tokens: g.logits.tokens.clone(),
            steps: g.logits.steps.len(),
        })
        .collect()
}
