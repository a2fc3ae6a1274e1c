//! Stage 2: one row, top to bottom. `plan` resolves once what the row
//! needs from matrix.toml, the tier and CPU tables and the prepared
//! context (arch, the runner of each cell with its qemu `-cpu` argument,
//! what each CPU lacks of the tier); `run` then seeds the row's target dir
//! → builds `ml` → reads what its guard checks (`ml isa`) → audits the
//! disassembly → builds the test binaries → runs the cells (`cell`) →
//! times `ml bench` (`bench`) → gives the row's verdict → keeps or removes
//! the target dir. The later steps only read the plan.

use super::prepare::{under_wine, Ctx};
use super::{bench, cell};
use crate::audit::{self, Baselines};
use crate::builder::{self, BuilderKind, BuiltRow, RowBuild, TestExe};
use crate::config::{Cell, Place, Row, TargetSpec};
use crate::isa::{self, Arch, Tier};
use crate::outcome::{self, RunOutput};
use crate::report::{CellReport, CellResult, RowReport, RowStatus, Step, StepStatus};
use crate::runner::Runner;
use crate::setup;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::Instant;
use xshell::{cmd, Shell};

/// What a row is, resolved once; the stages after `plan` only read it.
pub struct RowPlan<'a> {
    pub row: &'a Row,
    pub arch: Arch,
    pub tier: &'static Tier,
    pub spec: &'a TargetSpec,
    /// Its `native` cells run under Wine (a Windows row on a Linux host).
    pub under_wine: bool,
    /// What a CPU needs to run this build by the tables (the tier's and the
    /// target's features): the audit's baseline when `ml isa` says nothing.
    pub tier_needs: Vec<&'static str>,
    /// Where `ml isa` (which never refuses) can run before any cell: the
    /// host, else qemu's `max` model.
    pub probe: Option<Runner>,
    pub cells: Vec<CellPlan<'a>>,
}

/// One CPU of a row.
pub struct CellPlan<'a> {
    /// The cell as matrix.toml gives it.
    pub config: &'a Cell,
    /// The grid's column: `native`, `native (wine)`, `qemu:<model>`, or a
    /// compile-only cell's CPU class.
    pub label: String,
    /// How to run it (a qemu runner carries its `-cpu` argument), or why
    /// nothing here can.
    pub runner: std::result::Result<Runner, String>,
    /// What the tier needs that this CPU lacks by the tables: one of them
    /// must be named by a guard's refusal.
    pub expected_missing: Vec<&'static str>,
}

/// Resolves everything about `row` that does not need its build: the
/// later stages read the result and look nothing up again.
pub fn plan<'a>(ctx: &Ctx<'a>, row: &'a Row) -> RowPlan<'a> {
    let arch = row.arch();
    let tier = row.tier();
    let spec = ctx.matrix.target.get(&row.target).expect("validated");
    let tier_needs = tier.needs(arch);
    let wine = under_wine(row);
    let cells = row
        .cpus
        .iter()
        .map(|cell| {
            let place = cell.place(arch);
            let have: Vec<String> = match &place {
                Place::Native => ctx.host_features.clone(),
                Place::Qemu(m) => isa::cpu_model(arch, m).map(|m| m.features.clone()).unwrap_or_default(),
                Place::Nowhere(_) => vec![],
            };
            let runner = runner_for(ctx, row, arch, spec, &place).ok_or_else(|| match &ctx.wine {
                Some(Err(e)) if wine => format!("no Wine prefix to run it in: {e}"),
                _ => "no way to run this CPU".into(),
            });
            CellPlan {
                config: cell,
                label: match cell.label(arch) {
                    l if l == "native" && wine => "native (wine)".into(),
                    l => l,
                },
                runner,
                expected_missing: isa::missing(&tier_needs, &have),
            }
        })
        .collect();
    let probe = if ctx.host_arch.is_some_and(|h| row.runs_natively_on(h)) {
        runner_for(ctx, row, arch, spec, &Place::Native)
    } else {
        setup::which(&spec.qemu).and_then(|_| runner_for(ctx, row, arch, spec, &Place::Qemu("max".into())))
    };
    RowPlan {
        row,
        arch,
        tier,
        spec,
        under_wine: wine,
        tier_needs,
        probe,
        cells,
    }
}

fn runner_for(ctx: &Ctx, row: &Row, arch: Arch, spec: &TargetSpec, place: &Place) -> Option<Runner> {
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
            cpu_arg: isa::qemu_cpu_arg(arch, model),
            sysroot: if row.target == ctx.host_triple {
                None
            } else {
                spec.sysroot.clone()
            },
        }),
        Place::Nowhere(_) => None,
    }
}

/// What the build steps made, which the cells run.
pub struct Built<'a> {
    pub rb: RowBuild<'a>,
    pub ml: PathBuf,
    /// The test binaries (none in --quick mode or when their build failed).
    pub tests: Option<Vec<TestExe>>,
    pub tests_failed: bool,
}

impl Built<'_> {
    /// `ml args…` on `runner` (under `cross`, through its runner).
    pub fn exec_ml(&self, sh: &Shell, ctx: &Ctx, runner: &Runner, args: &[String]) -> Result<RunOutput> {
        match ctx.kind {
            BuilderKind::Cross => self.rb.cross_exec(
                sh,
                runner,
                &["run", "--release", "--bin", "ml"],
                args,
                &ctx.run_env(runner),
                ctx.timeout(),
            ),
            _ => runner.run(sh, &self.ml, args, &ctx.run_env(runner), ctx.timeout()),
        }
    }
}

/// A row with everything it needs: its target dir seeded from a built row,
/// the row run, then its target dir kept only as a seed of later rows.
pub fn run(sh: &Shell, ctx: &Ctx, plan: &RowPlan, built: &mut Vec<BuiltRow>, keep_target_dirs: bool) -> RowReport {
    let row = plan.row;
    let progress = ctx.progress;
    if let Some(how) = builder::seed(sh, ctx.root, row, built) {
        progress.done(&row.name, "target dir", 0.0, &how);
    }
    let first_of_its_kind = first_of_its_kind(row, built);
    let report = build_and_run(sh, ctx, plan);
    let built_ok = report.build.status == StepStatus::Ok;
    if built_ok && !built.iter().any(|b| b.name == row.name) {
        built.push(BuiltRow {
            name: row.name.clone(),
            target: row.target.clone(),
            rustflags: row.rustflags.clone(),
        });
    }
    let is_a_seed = built_ok && first_of_its_kind;
    if !keep_target_dirs && !is_a_seed {
        let dir = builder::target_dir(ctx.root, &row.name);
        if let Some(how) = builder::remove_target_dir(&dir) {
            progress.done(&row.name, "target dir", 0.0, &how);
        }
    }
    report
}

/// Whether no other built row's target dir can seed this row's, so that
/// this one is kept as the seed of its kind. The host scalar row is in
/// `built` before it runs (the `ml gen` build made its dir) and is the
/// seed of its kind all the same: without the name check it removed its
/// own dir, and every later x86-64 row built from nothing (55 s a row
/// instead of about 22).
fn first_of_its_kind(row: &Row, built: &[BuiltRow]) -> bool {
    !built
        .iter()
        .any(|b| b.name != row.name && builder::shares_target_dir_kind(row, &b.target, &b.rustflags))
}

fn build_and_run(sh: &Shell, ctx: &Ctx, plan: &RowPlan) -> RowReport {
    let row = plan.row;
    let progress = ctx.progress;
    let mut report = empty_row(row);
    // A tier the runtime does not have yet cannot be built: compile-only.
    if let Some(feature) = plan.tier.feature {
        if !ctx.runtime_features.iter().any(|rf| rf == feature) {
            return tier_not_implemented(sh, ctx, plan, feature);
        }
    }
    let rb = RowBuild {
        root: ctx.root,
        row,
        spec: plan.spec,
        host_triple: &ctx.host_triple,
        kind: ctx.kind,
    };
    report.cfg_target_features = rustc_cfg_features(sh, row);

    // 1. ml, release.
    progress.step(
        &row.name,
        &format!("build ml (release, {} {})", row.target, row.cargo_features().join(",")),
    );
    let t = Instant::now();
    let ml = match rb.build_ml(sh) {
        Ok(ml) => {
            report.build = Step::ok(
                format!("{}", ml.strip_prefix(ctx.root).unwrap_or(&ml).display()),
                t.elapsed().as_secs_f64(),
            );
            progress.done(&row.name, "build ml", report.build.seconds, "ok");
            ml
        }
        Err(e) => {
            let why = format!("build failed: {e:#}");
            progress.done(&row.name, "build ml", t.elapsed().as_secs_f64(), "FAILED");
            report.build = Step::failed(why, t.elapsed().as_secs_f64());
            report.status = RowStatus::Failed;
            report.note = "build failed".into();
            for c in &plan.cells {
                report.cells.push(cell_report(c, CellResult::Fail, "build failed"));
            }
            return report;
        }
    };
    let mut built = Built {
        rb,
        ml,
        tests: None,
        tests_failed: false,
    };

    // 2. What the guard of this build checks.
    if let Some(probe) = &plan.probe {
        if let Ok(o) = built.exec_ml(sh, ctx, probe, &["isa".to_string()]) {
            report.guard_needs = outcome::parse_isa(&o.stdout).0;
        }
    }

    // 3. Static guard proof.
    audit_ml(sh, ctx, plan, &built.ml, &mut report);

    // 4. Test binaries, test profile.
    if ctx.quick {
        report.tests_build = Step::skipped("--quick");
    } else if row.compile_only.is_some() {
        report.tests_build = Step::skipped("compile-only row");
    } else {
        progress.step(&row.name, "build test binaries (test profile)");
        let t = Instant::now();
        match built.rb.build_tests(sh) {
            Ok(exes) => {
                report.tests_build = Step::ok(format!("{} test binaries", exes.len()), t.elapsed().as_secs_f64());
                report.test_binaries = exes.iter().map(|e| e.name.clone()).collect();
                progress.done(
                    &row.name,
                    "build tests",
                    report.tests_build.seconds,
                    &format!("{} binaries", exes.len()),
                );
                built.tests = Some(exes);
            }
            Err(e) => {
                report.tests_build = Step::failed(format!("{e:#}"), t.elapsed().as_secs_f64());
                progress.done(&row.name, "build tests", report.tests_build.seconds, "FAILED");
            }
        }
    }
    built.tests_failed = report.tests_build.status == StepStatus::Failed;

    // 5. Cells, `jobs` at a time.
    report.cells = cell::run_all(ctx, plan, &built);

    // 6. Decode speed: the row's `ml` kept for the interleaved rounds after
    // the last row (`bench::bench_rounds`).
    if report
        .cells
        .iter()
        .any(|c| c.cpu == "native" && c.result == CellResult::Pass)
    {
        bench::stage_row(ctx, plan, &built.ml);
    }

    verdict(plan, &mut report);
    report
}

/// The audit of `ml`'s disassembly against what its guard checks (the
/// tier's needs by the tables when `ml isa` reported nothing).
fn audit_ml(sh: &Shell, ctx: &Ctx, plan: &RowPlan, ml: &Path, report: &mut RowReport) {
    let row = plan.row;
    let decoder = match plan.arch {
        Arch::X86_64 | Arch::X86 => "iced-x86".to_string(),
        Arch::Aarch64 | Arch::Arm => format!("{} -d", plan.spec.objdump),
    };
    ctx.progress.step(&row.name, &format!("audit ({decoder})"));
    let t = Instant::now();
    let guard = if report.guard_needs.is_empty() && plan.tier.name != "scalar" {
        plan.tier_needs.iter().map(|s| s.to_string()).collect()
    } else {
        report.guard_needs.clone()
    };
    match audit::audit_binary(
        sh,
        &plan.spec.objdump,
        plan.arch,
        ml,
        &Baselines::for_row(&row.target, &row.rustflags, guard),
    ) {
        Ok(a) => {
            report.audit_step = if a.ok {
                Step::ok(a.summary(), t.elapsed().as_secs_f64())
            } else {
                Step::failed(a.summary(), t.elapsed().as_secs_f64())
            };
            ctx.progress.done(
                &row.name,
                "audit",
                report.audit_step.seconds,
                if a.ok { "clean" } else { "VIOLATIONS" },
            );
            report.audit = Some(a);
        }
        Err(e) => {
            report.audit_step = Step::failed(format!("{e:#}"), t.elapsed().as_secs_f64());
            ctx.progress
                .done(&row.name, "audit", report.audit_step.seconds, "FAILED");
        }
    }
}

/// The row's status and note from its audit, test build and cells.
fn verdict(plan: &RowPlan, report: &mut RowReport) {
    let row = plan.row;
    let audit_ok = report.audit.as_ref().is_some_and(|a| a.ok);
    let cells_ok = report.cells.iter().all(|c| c.met());
    let tests_failed = report.tests_build.status == StepStatus::Failed;
    report.status = if !audit_ok || !cells_ok || tests_failed {
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
        notes.push(format!("audit: {}", report.audit_step.detail));
    }
    if tests_failed {
        notes.push("test build failed".into());
    }
    report.note = notes.join("; ");
}

/// A row whose tier the runtime has no cargo feature for yet: not built,
/// every cell compile-only.
fn tier_not_implemented(sh: &Shell, ctx: &Ctx, plan: &RowPlan, feature: &str) -> RowReport {
    let row = plan.row;
    let why = match &row.compile_only {
        Some(reason) => format!("{reason} (runtime/Cargo.toml has no feature `{feature}`: not built)"),
        None => format!("not implemented: runtime/Cargo.toml has no feature `{feature}` (not built)"),
    };
    ctx.progress.done(&row.name, "skip build", 0.0, &why);
    let mut report = empty_row(row);
    report.status = RowStatus::CompileOnly;
    report.note = why.clone();
    report.build = Step::skipped(why.clone());
    report.tests_build = Step::skipped("not built");
    report.audit_step = Step::skipped("not built");
    report.cfg_target_features = rustc_cfg_features(sh, row);
    for c in &plan.cells {
        report.cells.push(cell_report(c, CellResult::CompileOnly, &why));
    }
    report
}

/// A row missing a tool or package here: nothing built or run.
pub fn unavailable(plan: &RowPlan, why: &str) -> RowReport {
    let mut report = empty_row(plan.row);
    report.status = RowStatus::Unavailable;
    report.note = why.to_string();
    report.build = Step::skipped("unavailable");
    for c in &plan.cells {
        report.cells.push(cell_report(c, CellResult::Unavailable, why));
    }
    report
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

/// A cell's report before it runs (or when it never will).
pub fn cell_report(c: &CellPlan, result: CellResult, reason: &str) -> CellReport {
    CellReport {
        cpu: c.config.cpu.clone(),
        label: c.label.clone(),
        ran_as: "not run".into(),
        runner: String::new(),
        expect: c.config.expect.name().into(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Host, Matrix};
    use crate::progress::Progress;
    use std::path::Path;

    const MATRIX: &str = r#"
[target.x86_64-unknown-linux-gnu]
qemu = "qemu-x86_64"
objdump = "objdump"
[target.i686-unknown-linux-gnu]
linker = "i686-linux-gnu-gcc"
qemu = "qemu-i386"
sysroot = "/usr/i686-linux-gnu"
objdump = "objdump"
[target.x86_64-pc-windows-gnu]
linker = "x86_64-w64-mingw32-gcc"
wine = "/usr/lib/wine/wine64"
objdump = "x86_64-w64-mingw32-objdump"
[[row]]
name = "sse41"
tier = "sse41"
target = "i686-unknown-linux-gnu"
cpus = [
  { cpu = "Haswell", expect = "pass" },
  { cpu = "qemu32", expect = "reject" },
  { cpu = "SSE4 laptop", expect = "compile-only", reason = "none here" },
]
[[row]]
name = "win"
tier = "avx2"
target = "x86_64-pc-windows-gnu"
cpus = [{ cpu = "native", expect = "pass" }]
"#;

    fn ctx<'a>(matrix: &'a Matrix, host: &Host, progress: &'a Progress) -> Ctx<'a> {
        Ctx {
            root: Path::new("/nonexistent"),
            matrix,
            kind: BuilderKind::Cargo,
            quick: true,
            jobs: 1,
            host_triple: "x86_64-unknown-linux-gnu".into(),
            host_arch: host.arch,
            host_features: host.features.clone(),
            runtime_features: vec![],
            golds: vec![],
            gold_error: None,
            icount_plugin: Err("not built".into()),
            progress,
            wine: Some(Err("wine said no".into())),
        }
    }

    #[test]
    fn a_plan_resolves_runners_cpu_arguments_and_what_each_cpu_lacks() {
        let host = Host {
            arch: Some(Arch::X86_64),
            features: "sse2 sse3 ssse3 sse4_1 sse4_2 avx fma avx2"
                .split(' ')
                .map(String::from)
                .collect(),
        };
        let matrix = Matrix::parse(MATRIX, &host).unwrap();
        let progress = Progress::new();
        let ctx = ctx(&matrix, &host, &progress);

        let p = plan(&ctx, &matrix.rows[0]);
        assert_eq!(p.arch, Arch::X86);
        assert_eq!(p.tier_needs, ["sse2", "ssse3", "sse4_1"]);
        assert!(!p.under_wine);
        let labels: Vec<&str> = p.cells.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["qemu:Haswell", "qemu:qemu32", "SSE4 laptop"]);
        // qemu-i386 running an x86-64 model: syscall and lm off, then what
        // TCG cannot do; the i686 sysroot since this is not the host triple.
        assert_eq!(
            p.cells[0].runner,
            Ok(Runner::Qemu {
                bin: "qemu-i386".into(),
                cpu: "Haswell".into(),
                cpu_arg: "Haswell,-syscall,-lm,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm".into(),
                sysroot: Some("/usr/i686-linux-gnu".into()),
            })
        );
        assert!(p.cells[0].expected_missing.is_empty());
        assert_eq!(p.cells[1].expected_missing, ["ssse3", "sse4_1"]);
        assert_eq!(p.cells[2].runner, Err("no way to run this CPU".to_string()));

        // A Windows row on Linux: native runs under Wine, here without a prefix.
        let p = plan(&ctx, &matrix.rows[1]);
        assert!(p.under_wine);
        assert_eq!(p.cells[0].label, "native (wine)");
        assert_eq!(
            p.cells[0].runner,
            Err("no Wine prefix to run it in: wine said no".to_string())
        );
        assert!(p.cells[0].expected_missing.is_empty());
        assert!(p.probe.is_none());
    }

    #[test]
    fn the_gen_builds_row_stays_the_seed_of_its_kind() {
        let host = Host {
            arch: Some(Arch::X86_64),
            features: ["sse2", "avx", "avx2", "fma"].map(String::from).to_vec(),
        };
        let matrix = Matrix::parse(MATRIX, &host).unwrap();
        let built_row = |name: &str, target: &str| BuiltRow {
            name: name.into(),
            target: target.into(),
            rustflags: vec![],
        };
        let (i686, win) = (&matrix.rows[0], &matrix.rows[1]);
        // The row whose dir `ml gen`'s build made (same name) keeps it.
        assert!(first_of_its_kind(i686, &[built_row("sse41", "i686-unknown-linux-gnu")]));
        // A later row of the same kind is seeded from it, and removed after.
        assert!(!first_of_its_kind(
            i686,
            &[built_row("scalar-i686", "i686-unknown-linux-gnu")]
        ));
        // Another triple is a kind of its own.
        assert!(first_of_its_kind(
            win,
            &[built_row("scalar-i686", "i686-unknown-linux-gnu")]
        ));
    }
}
