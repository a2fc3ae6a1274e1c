//! `harness matrix`: every row of matrix.toml built, run on each of its CPUs,
//! compared with the golden, its guard exercised and its disassembly
//! audited; then report/report.{md,json,html}. Exit 0 only when every row
//! met its expectation.

use crate::audit::{self, Baselines};
use crate::builder::{self, BuilderKind, RowBuild, TestExe};
use crate::config::{Expect, Host, Matrix, Place, Row};
use crate::floor;
use crate::golden::{self, Logits};
use crate::icount;
use crate::isa::{self, Arch};
use crate::outcome::{self, RunOutput};
use crate::progress::Progress;
use crate::report::{
    self, BenchInfo, CellReport, CellResult, E2e, GoldenInfo, HostInfo, Report, RowReport, RowStatus, Step, TestRun,
};
use crate::runner::Runner;
use crate::setup;
use crate::wine;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use xshell::{cmd, Shell};

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

/// One golden and the model it needs.
struct Gold {
    name: String,
    path: String,
    logits: Logits,
    model: PathBuf,
}

/// What every row and cell shares.
struct Ctx<'a> {
    root: &'a Path,
    matrix: &'a Matrix,
    kind: BuilderKind,
    quick: bool,
    jobs: usize,
    host_triple: String,
    host_arch: Option<Arch>,
    host_features: Vec<String>,
    runtime_features: Vec<String>,
    golds: Vec<Gold>,
    gold_error: Option<String>,
    /// The instruction-counting qemu plugin, or why there is none.
    icount_plugin: std::result::Result<PathBuf, String>,
    progress: &'a Progress,
    /// The Wine prefix of the Windows rows (a Linux host with any selected),
    /// or why it could not be prepared.
    wine: Option<std::result::Result<wine::Prepared, String>>,
}

impl Ctx<'_> {
    /// The environment of every run on `runner`.
    fn run_env(&self, runner: &Runner) -> Vec<(String, String)> {
        vec![
            // tests/cli.rs starts the target `ml` through this under emulation.
            ("ML_TEST_RUNNER".into(), runner.test_runner()),
            ("INSTA_WORKSPACE_ROOT".into(), self.root.display().to_string()),
            // Never write .snap.new files into golden/ from a matrix run.
            ("INSTA_UPDATE".into(), "no".into()),
            ("INSTA_FORCE_PASS".into(), "0".into()),
            // stdarch's rule: tests must not skip on a CPU expected to pass.
            ("ML_TEST_EVERYTHING".into(), "1".into()),
            ("RUST_BACKTRACE".into(), "0".into()),
        ]
    }
    fn timeout(&self) -> u64 {
        self.matrix.settings.timeout_secs
    }
}

pub fn root_dir() -> PathBuf {
    // The checkout the harness was built from; `cargo run -p harness` runs
    // it from anywhere inside.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let compiled = manifest.parent().unwrap_or(manifest).to_path_buf();
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            if dir.join("matrix.toml").exists() && dir.join("runtime/Cargo.toml").exists() {
                return dir.to_path_buf();
            }
        }
    }
    compiled
}

pub fn host_triple(sh: &Shell) -> Result<String> {
    let v = cmd!(sh, "rustc -vV").quiet().read().context("rustc -vV")?;
    v.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|s| s.trim().to_string())
        .context("rustc -vV printed no host line")
}

/// The runtime's cargo features, from runtime/Cargo.toml.
pub fn runtime_features(root: &Path) -> Result<Vec<String>> {
    let path = root.join("runtime/Cargo.toml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let t: toml::Table = toml::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
    Ok(t.get("features")
        .and_then(|f| f.as_table())
        .map(|f| f.keys().cloned().collect())
        .unwrap_or_default())
}

#[cfg(unix)]
fn no_core_dumps() {
    // qemu-user writes a core file for a guest that dies of a signal.
    let lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit with a valid pointer to an initialised rlimit.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &lim);
    }
}

#[cfg(not(unix))]
fn no_core_dumps() {}

/// Whether this host runs a row's `native` cells under Wine: a Windows
/// row on a host that is not Windows.
fn under_wine(row: &Row) -> bool {
    row.is_windows() && !cfg!(windows)
}

pub fn run(args: MatrixArgs) -> Result<bool> {
    no_core_dumps();
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
    let selected: Vec<&Row> = if args.only.is_empty() {
        matrix.rows.iter().collect()
    } else {
        let mut v = Vec::new();
        for name in &args.only {
            match matrix.row(name) {
                Some(r) => v.push(r),
                None => {
                    let names: Vec<&str> = matrix.rows.iter().map(|r| r.name.as_str()).collect();
                    bail!("--only {name}: no such row (rows: {})", names.join(", "));
                }
            }
        }
        v
    };
    let (kind, builder_note) = args.builder.resolve(&sh);
    progress.step(
        "matrix",
        &format!(
            "{} rows, builder {builder_note}{}",
            selected.len(),
            if args.quick { ", quick" } else { "" }
        ),
    );
    let host_triple = host_triple(&sh)?;

    // Set-up: what each row needs, installing what we can.
    let targets = setup::installed_targets(&sh);
    let all_needs: Vec<Vec<setup::Need>> = selected
        .iter()
        .map(|r| setup::needs(&sh, r, &matrix, kind, &host_triple, &targets))
        .collect();
    let mut setup_actions = setup::ensure(&sh, &all_needs, !args.no_install, &progress)?;
    let targets = setup::installed_targets(&sh);
    let all_needs: Vec<Vec<setup::Need>> = selected
        .iter()
        .map(|r| setup::needs(&sh, r, &matrix, kind, &host_triple, &targets))
        .collect();
    if setup_actions.is_empty() {
        setup_actions.push("nothing to install".into());
    }
    setup_actions.extend(native_changes.iter().map(|c| format!("--native-from-host: {c}")));
    let toolchain = setup::tool_versions(&sh, &matrix);

    // The golden models, generated by a host scalar `ml gen`.
    let mut ctx = Ctx {
        root: &root,
        matrix: &matrix,
        kind,
        quick: args.quick,
        jobs: args.jobs.max(1),
        host_triple: host_triple.clone(),
        host_arch: host.arch,
        host_features: host.features.clone(),
        runtime_features: runtime_features(&root)?,
        golds: Vec::new(),
        gold_error: None,
        icount_plugin: Err("not built".into()),
        progress: &progress,
        wine: None,
    };
    ctx.icount_plugin = icount::build_plugin(&sh, &root, &root.join("target/matrix/_icount")).map_err(|e| {
        progress.done("icount", "plugin", 0.0, &format!("not built: {e:#}"));
        format!("{e:#}")
    });
    // One Wine prefix for every Windows row that has what it needs.
    let mut target_notes = std::collections::BTreeMap::new();
    if let Some((row, _)) = selected
        .iter()
        .zip(&all_needs)
        .find(|(r, n)| under_wine(r) && n.iter().all(|n| n.present))
    {
        let bin = matrix.target[&row.target].wine.clone().unwrap_or_default();
        progress.step("wine", "prepare the prefix (target/matrix/_wine)");
        let t = Instant::now();
        let prepared = wine::prepare(&sh, &root, &bin).map_err(|e| format!("{e:#}"));
        let outcome = match &prepared {
            Ok(p) => p.note.clone(),
            Err(e) => format!("FAILED: {e}"),
        };
        progress.done("wine", "prefix", t.elapsed().as_secs_f64(), &outcome);
        setup_actions.push(format!("wine: {outcome}"));
        for r in selected.iter().filter(|r| under_wine(r)) {
            target_notes.insert(
                r.target.clone(),
                format!("`native` ran under Wine on this host's CPU ({outcome})."),
            );
        }
        ctx.wine = Some(prepared);
    }
    match prepare_golden(&sh, &ctx) {
        Ok(g) => ctx.golds = g,
        Err(e) => {
            progress.done("golden", "prepare", 0.0, &format!("FAILED: {e:#}"));
            ctx.gold_error = Some(format!("{e:#}"));
        }
    }

    let mut rows = Vec::new();
    // Rows built so far: (name, target, rustflags), for seeding target dirs.
    let mut built: Vec<(String, String, Vec<String>)> = Vec::new();
    if ctx.gold_error.is_none() {
        built.push((gen_dir_name(&ctx), ctx.host_triple.clone(), vec![]));
    }
    for (row, needs) in selected.iter().zip(&all_needs) {
        if ctx.gold_error.is_some() {
            // E.g. the runtime did not compile a moment ago: try again.
            if let Ok(g) = prepare_golden(&sh, &ctx) {
                ctx.golds = g;
                ctx.gold_error = None;
                built.push((gen_dir_name(&ctx), ctx.host_triple.clone(), vec![]));
            }
        }
        let missing: Vec<&setup::Need> = needs.iter().filter(|n| !n.present).collect();
        let r = if !missing.is_empty() {
            let why = missing.iter().map(|n| n.missing_line()).collect::<Vec<_>>().join("; ");
            progress.done(&row.name, "set-up", 0.0, &format!("unavailable: {why}"));
            unavailable_row(row, &why)
        } else {
            if let Some(how) = builder::seed(&sh, &root, row, &built) {
                progress.done(&row.name, "target dir", 0.0, &how);
            }
            let first_of_its_kind = !built.iter().any(|(_, t, f)| builder::shares_target_dir_kind(row, t, f));
            let r = run_row(&sh, &ctx, row);
            let built_ok = r.build.status == "ok";
            if built_ok {
                built.push((row.name.clone(), row.target.clone(), row.rustflags.clone()));
            }
            let is_a_seed = built_ok && first_of_its_kind;
            if !args.keep_target_dirs && !is_a_seed {
                let dir = builder::target_dir(&root, &row.name);
                if let Some(how) = builder::remove_target_dir(&dir) {
                    progress.done(&row.name, "target dir", 0.0, &how);
                }
            }
            r
        };
        progress.done(
            &row.name,
            "row",
            0.0,
            &format!(
                "{:?}: {}",
                r.status,
                r.cells
                    .iter()
                    .map(|c| format!("{}={}", c.label, c.grid()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        rows.push(r);
    }

    // Each tier must cost fewer instructions per token than the one below.
    for b in icount::ordering(&rows) {
        progress.done(&b.row, "instruction order", 0.0, &format!("FAILED: {}", b.message));
        if let Some(r) = rows.iter_mut().find(|r| r.name == b.row) {
            r.status = RowStatus::Failed;
            r.note = if r.note.is_empty() {
                b.message
            } else {
                format!("{}; {}", r.note, b.message)
            };
        }
    }

    // No Wine process outlives the matrix.
    if let Some(Ok(w)) = &ctx.wine {
        let bin = selected
            .iter()
            .find_map(|r| matrix.target.get(&r.target).and_then(|t| t.wine.clone()))
            .unwrap_or_default();
        wine::stop(&bin, &w.prefix);
    }

    let ok = rows.iter().all(|r| match r.status {
        RowStatus::Ok | RowStatus::CompileOnly => true,
        RowStatus::Unavailable => args.allow_unavailable,
        RowStatus::Failed => false,
    }) && ctx.gold_error.is_none();
    let golden_info = ctx
        .golds
        .iter()
        .map(|g| GoldenInfo {
            name: g.name.clone(),
            path: g.path.clone(),
            gen_args: g.logits.gen_args.clone(),
            model: g.logits.model.clone(),
            tokens: g.logits.tokens.clone(),
            steps: g.logits.steps.len(),
        })
        .collect();
    let rep = Report {
        schema: report::SCHEMA.into(),
        generated_utc: report::utc_now(),
        mode: if args.quick { "quick".into() } else { "full".into() },
        builder: builder_note,
        ok,
        elapsed_secs: progress.elapsed(),
        host: HostInfo {
            arch: std::env::consts::ARCH.into(),
            triple: host_triple,
            cpu: isa::host_cpu_name(),
            features: host.features.clone(),
        },
        toolchain,
        setup: setup_actions,
        golden: golden_info,
        bench: bench_info(&sh, &ctx, &rows),
        rows,
        target_notes,
    };
    let out = root.join(&args.out);
    report::write_all(&out, &rep)?;
    println!("{}", report::grid_markdown(&rep));
    println!(
        "{} in {:.0}s — report: {}/report.md, report.json, report.html",
        if ok { "matrix PASSED" } else { "matrix FAILED" },
        rep.elapsed_secs,
        out.display()
    );
    if let Some(e) = &ctx.gold_error {
        println!("golden: {e}");
    }
    Ok(ok)
}

/// The rows' `ml bench` results with their speedup over the scalar row of
/// the same target; or why there are none (checked, not assumed).
fn bench_info(sh: &Shell, ctx: &Ctx, rows: &[RowReport]) -> BenchInfo {
    let mut results: Vec<report::BenchResult> = rows.iter().filter_map(|r| r.bench.clone()).collect();
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
    let ml = gen_ml_path(ctx);
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

/// The host-built scalar `ml` used for `ml gen`.
fn gen_ml_path(ctx: &Ctx) -> PathBuf {
    builder::target_dir(ctx.root, &gen_dir_name(ctx))
        .join(&ctx.host_triple)
        .join("release")
        .join(builder::exe_name("ml", &ctx.host_triple))
}

/// Reuse the host scalar row's target dir if the matrix has one.
fn gen_dir_name(ctx: &Ctx) -> String {
    ctx.matrix
        .rows
        .iter()
        .find(|r| r.tier == "scalar" && r.target == ctx.host_triple && r.rustflags.is_empty() && r.features.is_empty())
        .map(|r| r.name.clone())
        .unwrap_or_else(|| "_gen".into())
}

fn prepare_golden(sh: &Shell, ctx: &Ctx) -> Result<Vec<Gold>> {
    let t = Instant::now();
    ctx.progress.step("golden", "build host scalar ml (for ml gen)");
    let dir = builder::target_dir(ctx.root, &gen_dir_name(ctx));
    let triple = &ctx.host_triple;
    let out = cmd!(
        sh,
        "cargo build --release -p runtime --bin ml --target {triple} --target-dir {dir}"
    )
    .env("CARGO_ENCODED_RUSTFLAGS", "")
    .quiet()
    .ignore_status()
    .output()?;
    if !out.status.success() {
        bail!(
            "host scalar ml build failed: {}",
            builder::tail(&String::from_utf8_lossy(&out.stderr), 12)
        );
    }
    let ml = gen_ml_path(ctx);
    let models = ctx.root.join("target/matrix/_models");
    std::fs::create_dir_all(&models)?;
    let mut golds = Vec::new();
    for rel in &ctx.matrix.settings.golden {
        let path = ctx.root.join(rel);
        let logits = golden::read_snapshot(&path)?;
        let name = Path::new(rel)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(rel)
            .to_string();
        let model = match &logits.model {
            // A model of the repository (the trained stories260K) is used in place.
            Some(file) => {
                let model = ctx.root.join(file);
                if !model.is_file() {
                    bail!("{rel} names the model {file}, which is not in the repository");
                }
                model
            }
            None => {
                let model = models.join(format!("{name}.mlb"));
                let gen_args = &logits.gen_args;
                let out = cmd!(sh, "{ml} gen --out {model} {gen_args...}")
                    .quiet()
                    .ignore_status()
                    .output()?;
                if !out.status.success() {
                    bail!(
                        "ml gen --out {} {}: {}",
                        model.display(),
                        gen_args.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                model
            }
        };
        golds.push(Gold {
            name,
            path: rel.clone(),
            logits,
            model,
        });
    }
    // A stories15M-shaped model for `ml bench` (decode speed per tier).
    let bench = bench_model_path(ctx);
    let bench_args = BENCH_GEN_ARGS;
    let out = cmd!(sh, "{ml} gen --out {bench} {bench_args...}")
        .quiet()
        .ignore_status()
        .output()?;
    if !out.status.success() {
        ctx.progress.done(
            "golden",
            "bench model",
            0.0,
            &format!("not generated: {}", String::from_utf8_lossy(&out.stderr).trim()),
        );
    }
    ctx.progress.done(
        "golden",
        "models generated",
        t.elapsed().as_secs_f64(),
        &format!("{} golden", golds.len()),
    );
    Ok(golds)
}

/// `ml gen` arguments of the bench model: stories15M's shape (dim 288,
/// 6 layers, 6 heads, hidden 768, vocab 32000), Q8_0 weights.
const BENCH_GEN_ARGS: &[&str] = &[
    "--seed",
    "7",
    "--wtype",
    "q8_0",
    "--dim",
    "288",
    "--layers",
    "6",
    "--heads",
    "6",
    "--kv-heads",
    "6",
    "--hidden",
    "768",
    "--vocab",
    "32000",
    "--max-seq",
    "256",
];

fn bench_model_path(ctx: &Ctx) -> PathBuf {
    ctx.root.join("target/matrix/_models/bench_stories15m_q8_0.mlb")
}

/// `ml bench --json` on the host CPU, after the row's cells (so nothing else
/// of the harness runs meanwhile). Emulated CPUs are never timed.
fn bench_row(sh: &Shell, ctx: &Ctx, row: &Row, ml: &Path) -> Option<report::BenchResult> {
    let model = bench_model_path(ctx);
    if ctx.quick || ctx.kind == BuilderKind::Cross || !model.exists() {
        return None;
    }
    let native_pass = row.cpus.iter().any(|c| c.cpu == "native" && c.expect == Expect::Pass);
    // Under Wine the CPU is the host's, but the row would time Wine too.
    if !native_pass || row.compile_only.is_some() || under_wine(row) {
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
        "--model",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([model.display().to_string()])
    .collect();
    let o = Runner::Native
        .run(sh, ml, &args, &ctx.run_env(&Runner::Native), ctx.timeout())
        .ok()?;
    if outcome::check_ran(&o).is_err() {
        ctx.progress
            .done(&row.name, "ml bench", o.seconds, &format!("no data: {}", o.describe()));
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).ok()?;
    let tps = v["model"]["decode_tok_per_s"].as_f64()?;
    ctx.progress
        .done(&row.name, "ml bench", o.seconds, &format!("{tps:.1} tok/s"));
    Some(report::BenchResult {
        tier: v["tier"].as_str().unwrap_or(&row.tier).to_string(),
        row: row.name.clone(),
        ran_as: "native".into(),
        tokens_per_sec: tps,
        speedup_vs_scalar: None,
        emulated: false,
        target: row.target.clone(),
        roofline_fraction: v["model"]["roofline_fraction"].as_f64(),
    })
}

fn unavailable_row(row: &Row, why: &str) -> RowReport {
    let mut r = empty_row(row);
    r.status = RowStatus::Unavailable;
    r.note = why.to_string();
    r.build = Step::skipped("unavailable");
    for c in &row.cpus {
        r.cells.push(cell_report(row, c, CellResult::Unavailable, why));
    }
    r
}

fn empty_row(row: &Row) -> RowReport {
    RowReport {
        name: row.name.clone(),
        tier: row.tier.clone(),
        target: row.target.clone(),
        cargo_features: row.cargo_features(),
        rustflags: row.rustflags.clone(),
        status: RowStatus::Ok,
        note: String::new(),
        build: Step::skipped(""),
        tests_build: Step::skipped(""),
        test_binaries: vec![],
        cfg_target_features: vec![],
        guard_needs: vec![],
        audit_step: Step::skipped(""),
        audit: None,
        cells: vec![],
        bench: None,
    }
}

fn cell_report(row: &Row, c: &crate::config::Cell, result: CellResult, reason: &str) -> CellReport {
    CellReport {
        cpu: c.cpu.clone(),
        label: match c.label(row.arch()) {
            l if l == "native" && under_wine(row) => "native (wine)".into(),
            l => l,
        },
        ran_as: "not run".into(),
        runner: String::new(),
        expect: c.expect.name().into(),
        result,
        reason: reason.to_string(),
        detected_features: None,
        kernel_tests: vec![],
        e2e: vec![],
        guard: None,
        seconds: 0.0,
        icount: vec![],
    }
}

fn runner_for(ctx: &Ctx, row: &Row, place: &Place) -> Option<Runner> {
    let spec = ctx.matrix.target.get(&row.target)?;
    match place {
        Place::Native if under_wine(row) => match &ctx.wine {
            Some(Ok(w)) => Some(Runner::Wine {
                bin: spec.wine.clone()?,
                prefix: w.prefix.clone(),
            }),
            _ => None,
        },
        Place::Native => Some(Runner::Native),
        Place::Qemu(model) => Some(Runner::Qemu {
            bin: spec.qemu.clone(),
            cpu: model.clone(),
            cpu_arg: isa::qemu_cpu_arg(row.arch(), model),
            sysroot: if row.target == ctx.host_triple {
                None
            } else {
                spec.sysroot.clone()
            },
        }),
        Place::Nowhere(_) => None,
    }
}

/// A runner that can execute `ml isa` (which never refuses) for this row.
fn probe_runner(ctx: &Ctx, row: &Row) -> Option<Runner> {
    if ctx.host_arch.is_some_and(|h| row.runs_natively_on(h)) {
        return runner_for(ctx, row, &Place::Native);
    }
    let spec = ctx.matrix.target.get(&row.target)?;
    setup::which(&spec.qemu)?;
    runner_for(ctx, row, &Place::Qemu("max".into()))
}

fn rustc_cfg_features(sh: &Shell, row: &Row) -> Vec<String> {
    let t = &row.target;
    let flags = &row.rustflags;
    let text = cmd!(sh, "rustc --print cfg --target {t} {flags...}")
        .quiet()
        .ignore_stderr()
        .read()
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix("target_feature=\""))
        .map(|l| l.trim_end_matches('"').to_string())
        .collect()
}

/// `ml isa` output: (needs, host features).
fn parse_isa(stdout: &str) -> (Vec<String>, Vec<String>) {
    let field = |key: &str| -> Vec<String> {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| {
                v.split_whitespace()
                    .filter(|f| *f != "(none)")
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    (field("needs features:"), field("host features:"))
}

fn exec_ml(sh: &Shell, ctx: &Ctx, rb: &RowBuild, runner: &Runner, ml: &Path, args: &[String]) -> Result<RunOutput> {
    match ctx.kind {
        BuilderKind::Cross => rb.cross_exec(
            sh,
            runner,
            &["run", "--release", "--bin", "ml"],
            args,
            &ctx.run_env(runner),
            ctx.timeout(),
        ),
        _ => runner.run(sh, ml, args, &ctx.run_env(runner), ctx.timeout()),
    }
}

fn run_row(sh: &Shell, ctx: &Ctx, row: &Row) -> RowReport {
    let mut r = empty_row(row);
    let tier = row.tier();
    let p = ctx.progress;
    // A tier the runtime does not have yet cannot be built: compile-only.
    if let Some(f) = tier.feature {
        if !ctx.runtime_features.iter().any(|rf| rf == f) {
            let why = match &row.compile_only {
                Some(reason) => format!("{reason} (runtime/Cargo.toml has no feature `{f}`: not built)"),
                None => format!("not implemented: runtime/Cargo.toml has no feature `{f}` (not built)"),
            };
            p.done(&row.name, "skip build", 0.0, &why);
            r.status = RowStatus::CompileOnly;
            r.note = why.clone();
            r.build = Step::skipped(why.clone());
            r.tests_build = Step::skipped("not built");
            r.audit_step = Step::skipped("not built");
            r.cfg_target_features = rustc_cfg_features(sh, row);
            for c in &row.cpus {
                r.cells.push(cell_report(row, c, CellResult::CompileOnly, &why));
            }
            return r;
        }
    }
    let spec = ctx.matrix.target.get(&row.target).expect("validated").clone();
    let rb = RowBuild {
        root: ctx.root,
        row,
        spec: &spec,
        host_triple: &ctx.host_triple,
        kind: ctx.kind,
    };
    r.cfg_target_features = rustc_cfg_features(sh, row);

    // 1. ml, release.
    p.step(
        &row.name,
        &format!("build ml (release, {} {})", row.target, row.cargo_features().join(",")),
    );
    let t = Instant::now();
    let ml = match rb.build_ml(sh) {
        Ok(ml) => {
            r.build = Step::ok(
                format!("{}", ml.strip_prefix(ctx.root).unwrap_or(&ml).display()),
                t.elapsed().as_secs_f64(),
            );
            p.done(&row.name, "build ml", r.build.seconds, "ok");
            ml
        }
        Err(e) => {
            let why = format!("build failed: {e:#}");
            p.done(&row.name, "build ml", t.elapsed().as_secs_f64(), "FAILED");
            r.build = Step::failed(why.clone(), t.elapsed().as_secs_f64());
            r.status = RowStatus::Failed;
            r.note = "build failed".into();
            for c in &row.cpus {
                r.cells.push(cell_report(row, c, CellResult::Fail, "build failed"));
            }
            return r;
        }
    };

    // 2. What the guard of this build checks.
    if let Some(pr) = probe_runner(ctx, row) {
        if let Ok(o) = exec_ml(sh, ctx, &rb, &pr, &ml, &["isa".to_string()]) {
            r.guard_needs = parse_isa(&o.stdout).0;
        }
    }

    // 3. Static guard proof.
    p.step(&row.name, &format!("audit ({} -d)", spec.objdump));
    let t = Instant::now();
    let arch = row.arch();
    let guard = if r.guard_needs.is_empty() && tier.name != "scalar" {
        tier.needs(arch).iter().map(|s| s.to_string()).collect()
    } else {
        r.guard_needs.clone()
    };
    match audit::audit_binary(
        sh,
        &spec.objdump,
        arch,
        &ml,
        &Baselines::for_row(&row.target, &row.rustflags, guard),
    ) {
        Ok(a) => {
            r.audit_step = if a.ok {
                Step::ok(a.summary(), t.elapsed().as_secs_f64())
            } else {
                Step::failed(a.summary(), t.elapsed().as_secs_f64())
            };
            p.done(
                &row.name,
                "audit",
                r.audit_step.seconds,
                if a.ok { "clean" } else { "VIOLATIONS" },
            );
            r.audit = Some(a);
        }
        Err(e) => {
            r.audit_step = Step::failed(format!("{e:#}"), t.elapsed().as_secs_f64());
            p.done(&row.name, "audit", r.audit_step.seconds, "FAILED");
        }
    }

    // 4. Test binaries, test profile.
    let mut tests: Option<Vec<TestExe>> = None;
    if ctx.quick {
        r.tests_build = Step::skipped("--quick");
    } else if row.compile_only.is_some() {
        r.tests_build = Step::skipped("compile-only row");
    } else {
        p.step(&row.name, "build test binaries (test profile)");
        let t = Instant::now();
        match rb.build_tests(sh) {
            Ok(exes) => {
                r.tests_build = Step::ok(format!("{} test binaries", exes.len()), t.elapsed().as_secs_f64());
                r.test_binaries = exes.iter().map(|e| e.name.clone()).collect();
                p.done(
                    &row.name,
                    "build tests",
                    r.tests_build.seconds,
                    &format!("{} binaries", exes.len()),
                );
                tests = Some(exes);
            }
            Err(e) => {
                r.tests_build = Step::failed(format!("{e:#}"), t.elapsed().as_secs_f64());
                p.done(&row.name, "build tests", r.tests_build.seconds, "FAILED");
            }
        }
    }

    // 5. Cells, `jobs` at a time.
    let cells: Vec<Mutex<Option<CellReport>>> = row.cpus.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..ctx.jobs.min(row.cpus.len()) {
            s.spawn(|| {
                let Ok(sh) = Shell::new() else { return };
                sh.change_dir(ctx.root);
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(cell) = row.cpus.get(i) else { break };
                    let rep = run_cell(
                        &sh,
                        ctx,
                        &rb,
                        row,
                        cell,
                        &ml,
                        tests.as_deref(),
                        r.tests_build.status == "failed",
                    );
                    *cells[i].lock().unwrap() = Some(rep);
                }
            });
        }
    });
    r.cells = cells
        .into_iter()
        .map(|m| m.into_inner().unwrap().expect("every cell ran"))
        .collect();
    if r.cells
        .iter()
        .any(|c| c.cpu == "native" && c.result == CellResult::Pass)
    {
        r.bench = bench_row(sh, ctx, row, &ml);
    }

    let audit_ok = r.audit.as_ref().is_some_and(|a| a.ok);
    let cells_ok = r.cells.iter().all(|c| c.met());
    r.status = if !audit_ok || !cells_ok || r.tests_build.status == "failed" {
        RowStatus::Failed
    } else if row.compile_only.is_some() {
        RowStatus::CompileOnly
    } else {
        RowStatus::Ok
    };
    let mut notes = Vec::new();
    if let Some(c) = &row.compile_only {
        notes.push(c.clone());
    }
    if !audit_ok {
        notes.push(format!("audit: {}", r.audit_step.detail));
    }
    if r.tests_build.status == "failed" {
        notes.push("test build failed".into());
    }
    r.note = notes.join("; ");
    r
}

#[allow(clippy::too_many_arguments)]
fn run_cell(
    sh: &Shell,
    ctx: &Ctx,
    rb: &RowBuild,
    row: &Row,
    cell: &crate::config::Cell,
    ml: &Path,
    tests: Option<&[TestExe]>,
    tests_failed: bool,
) -> CellReport {
    let t = Instant::now();
    let arch = row.arch();
    let label = cell.label(arch);
    let mut rep = cell_report(row, cell, CellResult::Pass, "");
    if row.compile_only.is_some() || cell.expect == Expect::CompileOnly {
        rep.result = CellResult::CompileOnly;
        rep.reason = cell.reason.clone().or(row.compile_only.clone()).unwrap_or_default();
        return rep;
    }
    let Some(runner) = runner_for(ctx, row, &cell.place(arch)) else {
        rep.result = CellResult::Fail;
        rep.reason = match &ctx.wine {
            Some(Err(e)) if under_wine(row) => format!("no Wine prefix to run it in: {e}"),
            _ => "no way to run this CPU".into(),
        };
        return rep;
    };
    rep.ran_as = runner.how();
    rep.runner = runner.command_line();
    let p = ctx.progress;
    let step = format!("{label} (expect {})", cell.expect.name());
    p.step(&row.name, &step);
    if cell.expect == Expect::BelowFloor {
        below_floor_cell(sh, ctx, row, &runner, ml, tests, &mut rep);
        if rep.result == CellResult::BelowFloor {
            rep.reason = format!("{} — {}", cell.reason.as_deref().unwrap_or_default(), rep.reason);
        }
        rep.seconds = t.elapsed().as_secs_f64();
        p.done(&row.name, &step, rep.seconds, &rep.grid());
        return rep;
    }
    let mut failures: Vec<String> = Vec::new();

    // What the build sees on this CPU.
    if let Ok(o) = exec_ml(sh, ctx, rb, &runner, ml, &["isa".to_string()]) {
        if o.sigill() {
            failures.push(format!("ml isa: {}", o.describe()));
        } else {
            rep.detected_features = Some(parse_isa(&o.stdout).1);
        }
    }
    // The features the tier needs that this CPU lacks (by the tables).
    let have: Vec<String> = match cell.place(arch) {
        Place::Native => ctx.host_features.clone(),
        Place::Qemu(m) => isa::cpu_model(arch, &m)
            .map(|m| m.features.iter().map(|s| s.to_string()).collect())
            .unwrap_or_default(),
        Place::Nowhere(_) => vec![],
    };
    let expected_missing = isa::missing(&row.tier().needs(arch), &have);

    let first_model = ctx
        .golds
        .first()
        .map(|g| g.model.clone())
        .unwrap_or_else(|| ctx.root.join("target/matrix/_models/none.mlb"));
    match cell.expect {
        Expect::Reject => {
            let args = vec![
                "logits".to_string(),
                first_model.display().to_string(),
                "--tokens".into(),
                "1,7,42,100".into(),
                "-n".into(),
                "16".into(),
            ];
            match exec_ml(sh, ctx, rb, &runner, ml, &args) {
                Ok(o) => match outcome::check_reject(&o, &expected_missing) {
                    Ok(g) => rep.guard = Some(g),
                    Err(e) => failures.push(format!("ml logits: {e}")),
                },
                Err(e) => failures.push(format!("ml logits: {e:#}")),
            }
        }
        Expect::Pass => {
            if let Some(e) = &ctx.gold_error {
                failures.push(format!("golden unavailable: {e}"));
            }
            for g in &ctx.golds {
                let tokens = g
                    .logits
                    .tokens
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(",");
                let args = vec![
                    "logits".to_string(),
                    g.model.display().to_string(),
                    "--tokens".into(),
                    tokens,
                    "-n".into(),
                    g.logits.steps.len().to_string(),
                ];
                let e2e = match exec_ml(sh, ctx, rb, &runner, ml, &args) {
                    Err(e) => E2e {
                        golden: g.name.clone(),
                        ok: false,
                        max_rel_err: None,
                        worst_pos: None,
                        tokens_match: None,
                        detail: format!("{e:#}"),
                    },
                    Ok(o) => match outcome::check_ran(&o) {
                        Err(e) => E2e {
                            golden: g.name.clone(),
                            ok: false,
                            max_rel_err: None,
                            worst_pos: None,
                            tokens_match: None,
                            detail: format!("ml logits: {e}"),
                        },
                        Ok(()) => match serde_json::from_str::<Logits>(&o.stdout) {
                            Err(e) => E2e {
                                golden: g.name.clone(),
                                ok: false,
                                max_rel_err: None,
                                worst_pos: None,
                                tokens_match: None,
                                detail: format!("ml logits printed no valid JSON: {e}"),
                            },
                            Ok(got) => {
                                let c = golden::compare(&g.logits, &got, ctx.matrix.settings.tolerance);
                                E2e {
                                    golden: g.name.clone(),
                                    ok: c.ok,
                                    max_rel_err: Some(c.max_rel_err),
                                    worst_pos: c.worst_pos,
                                    tokens_match: Some(c.tokens_match),
                                    detail: c.summary(),
                                }
                            }
                        },
                    },
                };
                if !e2e.ok {
                    failures.push(format!("e2e {}: {}", e2e.golden, e2e.detail));
                }
                rep.e2e.push(e2e);
            }
        }
        // Compile-only cells never run; `host` was resolved when the matrix loaded.
        Expect::CompileOnly | Expect::Host | Expect::BelowFloor => unreachable!(),
    }

    // Kernel tests (full mode).
    if tests_failed && !ctx.quick {
        failures.push("test binaries did not build".into());
    }
    if let Some(exes) = tests {
        match ctx.kind {
            BuilderKind::Cross => {
                if cell.expect == Expect::Pass {
                    let tr = match rb.cross_exec(
                        sh,
                        &runner,
                        &["test", "--no-fail-fast"],
                        &[],
                        &ctx.run_env(&runner),
                        ctx.timeout(),
                    ) {
                        Ok(o) => test_run_pass("cross test (all binaries)", &o),
                        Err(e) => TestRun {
                            name: "cross test".into(),
                            ok: false,
                            detail: format!("{e:#}"),
                            counts: Default::default(),
                            seconds: 0.0,
                        },
                    };
                    if !tr.ok {
                        failures.push(format!("kernel tests: {}", tr.detail));
                    }
                    rep.kernel_tests.push(tr);
                }
            }
            _ => {
                for exe in exes {
                    let run = || runner.run(sh, &exe.path, &[], &ctx.run_env(&runner), ctx.timeout());
                    let mut out = run();
                    // qemu-user 7.2 can deadlock in a guest's fork (a test
                    // spawning `ml`) before the exec: a hang of the emulator,
                    // not of the code under test. Such a binary runs once
                    // more, and the report says so.
                    let mut first_timed_out = None;
                    if let (Runner::Qemu { .. }, Ok(o)) = (&runner, &out) {
                        if o.timed_out && cell.expect == Expect::Pass {
                            first_timed_out = Some(o.seconds);
                            p.step(
                                &row.name,
                                &format!("{}: timed out under qemu-user, running it again", exe.name),
                            );
                            out = run();
                        }
                    }
                    let mut tr = match out {
                        Err(e) => TestRun {
                            name: exe.name.clone(),
                            ok: false,
                            detail: format!("{e:#}"),
                            counts: Default::default(),
                            seconds: 0.0,
                        },
                        Ok(o) => match cell.expect {
                            Expect::Pass => test_run_pass(&exe.name, &o),
                            _ => test_run_reject(&exe.name, &o, &expected_missing),
                        },
                    };
                    if let Some(secs) = first_timed_out {
                        tr.detail = format!(
                            "{} (on its second run: the first timed out after {secs:.0}s)",
                            tr.detail
                        );
                    }
                    if !tr.ok {
                        failures.push(format!("{}: {}", tr.name, tr.detail));
                    }
                    rep.kernel_tests.push(tr);
                }
            }
        }
    }

    // Instructions per decoded token, on pass cells under qemu.
    if cell.expect == Expect::Pass
        && failures.is_empty()
        && matches!(runner, Runner::Qemu { .. })
        && ctx.kind != BuilderKind::Cross
    {
        match count_instructions(ctx, row, &runner, ml, &label) {
            Ok(costs) => {
                // Whether a repeated run counted the same is reported, not
                // enforced: on some qemu x86 models two identical runs still
                // differ by a few instructions (seen after --no-stats and
                // setarch -R; cause not yet found), and the per-token figure
                // moves by far less than any tier's margin.
                rep.icount = costs;
            }
            Err(e) => failures.push(format!("instruction count: {e:#}")),
        }
    }

    rep.seconds = t.elapsed().as_secs_f64();
    if failures.is_empty() {
        rep.result = if cell.expect == Expect::Reject {
            CellResult::Rejected
        } else {
            CellResult::Pass
        };
    } else {
        rep.result = CellResult::Fail;
        rep.reason = failures.join("; ");
    }
    p.done(&row.name, &step, rep.seconds, &rep.grid());
    rep
}

/// Instructions per decoded token of the random-weight golden models
/// (`ml gen` ones: Q8_0 and Q4_0) on one qemu cell, by the difference of a
/// short and a long greedy run on one thread; the first model's short run
/// is repeated, and must count exactly the same.
fn count_instructions(ctx: &Ctx, row: &Row, runner: &Runner, ml: &Path, label: &str) -> Result<Vec<icount::TokenCost>> {
    let plugin = ctx
        .icount_plugin
        .as_ref()
        .map_err(|e| anyhow::anyhow!("no plugin: {e}"))?;
    let dir = builder::target_dir(ctx.root, &row.name).join("icount");
    std::fs::create_dir_all(&dir)?;
    let safe_label: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let mut costs = Vec::new();
    for (i, g) in ctx.golds.iter().filter(|g| g.logits.model.is_none()).enumerate() {
        let out = |n: u32, k: &str| dir.join(format!("{safe_label}-{}-{n}{k}.txt", g.name));
        let count = |n: u32, k: &str| {
            icount::run_counted(
                runner,
                plugin,
                ml,
                &icount::run_args(&g.model, n),
                &out(n, k),
                ctx.timeout(),
            )
            .map(|(c, _)| c)
        };
        let short = count(icount::SHORT_RUN, "")?;
        let long = count(icount::LONG_RUN, "")?;
        let mut cost = icount::token_cost(&g.name, &short, &long);
        if i == 0 {
            cost.repeated_exactly = Some(count(icount::SHORT_RUN, "-again")?.total == short.total);
        }
        costs.push(cost);
    }
    Ok(costs)
}

/// A `below-floor` cell: `ml logits` and every test binary must die of
/// SIGILL before any instruction of their own ran, as qemu's trace shows
/// (`floor::check`). The trace needs this machine's qemu (and the target's
/// sysroot): with `cross`, whose test executables are paths inside its
/// container, only `ml` (built into the mounted target dir) is checked.
fn below_floor_cell(
    sh: &Shell,
    ctx: &Ctx,
    row: &Row,
    runner: &Runner,
    ml: &Path,
    tests: Option<&[TestExe]>,
    rep: &mut CellReport,
) {
    let fail = |rep: &mut CellReport, why: String| {
        rep.result = CellResult::Fail;
        rep.reason = why;
    };
    let prefix = runner.prefix();
    let Some((qemu, qemu_args)) = prefix.split_first() else {
        return fail(rep, "below-floor cells run under qemu only".into());
    };
    let logs = builder::target_dir(ctx.root, &row.name).join("floor-traces");
    if let Err(e) = std::fs::create_dir_all(&logs) {
        return fail(rep, format!("create {}: {e}", logs.display()));
    }
    let model = ctx
        .golds
        .first()
        .map(|g| g.model.display().to_string())
        .unwrap_or_default();
    let logits = ["logits", &model, "--tokens", "1,7,42,100", "-n", "16"].map(String::from);
    let mut runs: Vec<(String, PathBuf, Vec<String>)> = vec![("ml logits".into(), ml.to_path_buf(), logits.to_vec())];
    if ctx.kind != BuilderKind::Cross {
        for exe in tests.unwrap_or_default() {
            runs.push((exe.name.clone(), exe.path.clone(), vec![]));
        }
    }
    let safe = |s: &str| s.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    let mut failures = Vec::new();
    for (i, (name, exe, args)) in runs.iter().enumerate() {
        let log = logs.join(format!("{}-{i}.log", safe(&rep.cpu)));
        let mut argv: Vec<String> = qemu_args.to_vec();
        argv.extend(floor::qemu_trace_args(&log.display().to_string()));
        argv.push(exe.display().to_string());
        argv.extend(args.iter().cloned());
        let checked = Runner::Native
            .run(sh, Path::new(qemu), &argv, &ctx.run_env(runner), ctx.timeout())
            .map_err(|e| format!("{e:#}"))
            .and_then(|o| {
                let trace = std::fs::read_to_string(&log).unwrap_or_default();
                floor::check(&o, &trace).map(|ev| (ev, o.seconds))
            });
        // The traces of a run that got further can be large; the verdict
        // and its evidence are in the report.
        let _ = std::fs::remove_file(&log);
        let (ok, detail, seconds) = match checked {
            Ok((ev, secs)) => (true, ev.summary(), secs),
            Err(e) => (false, e, 0.0),
        };
        if i == 0 && ok {
            rep.reason = format!("{}: {detail}", name);
        }
        if !ok {
            failures.push(format!("{name}: {detail}"));
        }
        if i > 0 {
            rep.kernel_tests.push(TestRun {
                name: name.clone(),
                ok,
                detail,
                counts: Default::default(),
                seconds,
            });
        }
    }
    let _ = std::fs::remove_dir(&logs);
    if failures.is_empty() {
        rep.result = CellResult::BelowFloor;
    } else {
        fail(rep, failures.join("; "));
    }
}

fn test_run_pass(name: &str, o: &RunOutput) -> TestRun {
    let counts = outcome::parse_test_output(&o.stdout, &o.stderr);
    let (ok, detail) = match outcome::check_ran(o) {
        Err(e) => (false, format!("{e}{}", failed_tests(&o.stdout))),
        Ok(()) if counts.failed > 0 => (false, format!("{} failed", counts.failed)),
        Ok(()) if !counts.skipped.is_empty() => (
            false,
            format!("a test skipped itself on a CPU expected to pass: {}", counts.skipped[0]),
        ),
        Ok(()) => (true, "ran".to_string()),
    };
    TestRun {
        name: name.to_string(),
        ok,
        detail,
        counts,
        seconds: o.seconds,
    }
}

fn failed_tests(stdout: &str) -> String {
    let v: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test ").and_then(|r| r.strip_suffix(" ... FAILED")))
        .take(5)
        .collect();
    if v.is_empty() {
        String::new()
    } else {
        format!(" (failed: {})", v.join(", "))
    }
}

/// On a CPU the build must refuse: each test binary is rejected by the
/// guard (exit 7 naming the feature) or completes without reaching a
/// guarded kernel; SIGILL or any other end fails.
fn test_run_reject(name: &str, o: &RunOutput, expected_missing: &[&str]) -> TestRun {
    let counts = outcome::parse_test_output(&o.stdout, &o.stderr);
    let (ok, detail) = if o.code == Some(0) && !o.sigill() {
        (true, "ran to completion (reached no guarded kernel)".to_string())
    } else if let Some(n) = (o.code == Some(101) && !o.sigill())
        .then(|| outcome::failures_are_guard_refusals(&o.stdout, expected_missing))
        .flatten()
    {
        (true, format!("{n} test(s) failed only because the `ml` they start was refused by the guard (exit 7 naming the missing feature)"))
    } else if o.code == Some(101) && !o.sigill() {
        // Say which failed tests show no guard refusal: those are the real
        // failures (or tests that hide why the `ml` they started failed).
        let blocks = outcome::failed_test_blocks(&o.stdout);
        let unexplained: Vec<&str> = blocks
            .iter()
            .filter(|(_, b)| outcome::parse_guard(b).is_none())
            .map(|(n, _)| n.as_str())
            .collect();
        (
            false,
            format!(
                "exit 101 instead of the guard's exit 7: {} of {} failed test(s) show no guard refusal in their output: {}",
                unexplained.len(),
                blocks.len(),
                unexplained.iter().take(4).copied().collect::<Vec<_>>().join(", ")
            ),
        )
    } else {
        match outcome::check_reject(o, expected_missing) {
            Ok(_) => (true, "rejected".to_string()),
            Err(e) => (false, format!("{e}{}", failed_tests(&o.stdout))),
        }
    };
    TestRun {
        name: name.to_string(),
        ok,
        detail,
        counts,
        seconds: o.seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ml_isa() {
        let out = "build tier:        avx2\ntarget:            x86_64\nneeds features:    avx avx2 fma\nhost features:     sse2 sse3\nruns on this CPU:  no\n";
        let (needs, host) = parse_isa(out);
        assert_eq!(needs, vec!["avx", "avx2", "fma"]);
        assert_eq!(host, vec!["sse2", "sse3"]);
        let (needs, _) = parse_isa("needs features:    (none)\n");
        assert!(needs.is_empty());
    }

    #[test]
    fn a_test_binary_that_sigills_on_a_reject_cpu_fails() {
        let o = RunOutput {
            signal: Some(4),
            stderr: "qemu: uncaught target signal 4 (Illegal instruction)".into(),
            ..Default::default()
        };
        let t = test_run_reject("tests/kernels.rs", &o, &["avx2"]);
        assert!(!t.ok);
        assert!(t.detail.contains("SIGILL"), "{}", t.detail);
        let o = RunOutput {
            code: Some(7),
            stderr: "error: this build needs avx2; missing: avx avx2 fma; this CPU has: sse2".into(),
            ..Default::default()
        };
        assert!(test_run_reject("tests/kernels.rs", &o, &["avx2"]).ok);
    }

    #[test]
    fn a_reject_cpu_excuses_only_guard_refusals_of_a_spawned_ml() {
        let stdout = "test a ... FAILED\n\nfailures:\n\n---- a stdout ----\nml gen failed: error: this build needs avx2; missing: avx fma avx2; this CPU has: sse2\n\nfailures:\n    a\n\ntest result: FAILED. 0 passed; 1 failed;\n";
        let o = RunOutput {
            code: Some(101),
            stdout: stdout.into(),
            ..Default::default()
        };
        let t = test_run_reject("tests/cli.rs", &o, &["avx2"]);
        assert!(t.ok, "{}", t.detail);
        let o = RunOutput {
            code: Some(101),
            stdout: stdout.replace("ml gen failed: error: this build needs", "boom"),
            ..Default::default()
        };
        assert!(!test_run_reject("tests/cli.rs", &o, &["avx2"]).ok);
    }

    #[test]
    fn a_test_binary_that_skips_on_a_pass_cpu_fails() {
        let o = RunOutput {
            code: Some(0),
            stdout: "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n".into(),
            stderr: "skipping: avx2 not detected\n".into(),
            ..Default::default()
        };
        let t = test_run_pass("tests/kernels.rs", &o);
        assert!(!t.ok);
        assert!(t.detail.contains("skipped itself"), "{}", t.detail);
        let o = RunOutput {
            code: Some(101),
            stdout: "test a ... FAILED\ntest result: FAILED. 1 passed; 1 failed; 0 ignored\n".into(),
            ..Default::default()
        };
        let t = test_run_pass("tests/kernels.rs", &o);
        assert!(!t.ok);
        assert!(t.detail.contains("failed: a"), "{}", t.detail);
    }
}
