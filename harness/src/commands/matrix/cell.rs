//! Stage 3: one cell, a row's build on one CPU, against the cell's
//! expectation. In order: what `ml isa` sees there; then the golden
//! (`pass`: every golden's logits within tolerance) or the guard's refusal
//! (`reject`: exit 7 naming a feature the CPU lacks); then each kernel test
//! binary (full mode); then, on qemu pass cells, the instructions per
//! token. A `below-floor` cell instead checks that `ml` and every test
//! binary die of SIGILL before any instruction of their own ran.

use super::prepare::{Ctx, Gold};
use super::row::{cell_report, Built, CellPlan, RowPlan};
use crate::builder::{self, BuilderKind, TestExe};
use crate::config::Expect;
use crate::floor;
use crate::golden::{self, Logits};
use crate::icount;
use crate::outcome::{self, RunOutput};
use crate::report::{CellReport, CellResult, E2e, TestRun};
use crate::runner::Runner;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use xshell::Shell;

/// Every cell of a row, `ctx.jobs` at a time, in the row's order.
pub fn run_all(ctx: &Ctx, plan: &RowPlan, built: &Built) -> Vec<CellReport> {
    let slots: Vec<Mutex<Option<CellReport>>> = plan.cells.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..ctx.jobs.min(plan.cells.len()) {
            s.spawn(|| {
                let Ok(sh) = Shell::new() else { return };
                sh.change_dir(ctx.root);
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(cell) = plan.cells.get(i) else { break };
                    let report = run(&sh, ctx, plan, cell, built);
                    *slots[i].lock().unwrap() = Some(report);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|m| m.into_inner().unwrap().expect("every cell ran"))
        .collect()
}

/// One cell being run: what its steps read.
struct CellRun<'a> {
    sh: &'a Shell,
    ctx: &'a Ctx<'a>,
    plan: &'a RowPlan<'a>,
    cell: &'a CellPlan<'a>,
    runner: &'a Runner,
    built: &'a Built<'a>,
}

fn run(sh: &Shell, ctx: &Ctx, plan: &RowPlan, cell: &CellPlan, built: &Built) -> CellReport {
    let t = Instant::now();
    let row = plan.row;
    let config = cell.config;
    let mut report = cell_report(cell, CellResult::Pass, "");
    if row.compile_only.is_some() || config.expect == Expect::CompileOnly {
        report.result = CellResult::CompileOnly;
        report.reason = config.reason.clone().or(row.compile_only.clone()).unwrap_or_default();
        return report;
    }
    let runner = match &cell.runner {
        Ok(r) => r,
        Err(why) => {
            report.result = CellResult::Fail;
            report.reason = why.clone();
            return report;
        }
    };
    report.ran_as = runner.how();
    report.runner = runner.command_line();
    let run = CellRun {
        sh,
        ctx,
        plan,
        cell,
        runner,
        built,
    };
    let progress = ctx.progress;
    let step = format!("{} (expect {})", config.label(plan.arch), config.expect.name());
    progress.step(&row.name, &step);
    if config.expect == Expect::BelowFloor {
        run.below_floor(&mut report);
        if report.result == CellResult::BelowFloor {
            report.reason = format!("{} — {}", config.reason.as_deref().unwrap_or_default(), report.reason);
        }
        report.seconds = t.elapsed().as_secs_f64();
        progress.done(&row.name, &step, report.seconds, &report.grid());
        return report;
    }
    let mut failures: Vec<String> = Vec::new();

    // What the build sees on this CPU.
    if let Ok(o) = run.ml(&["isa".to_string()]) {
        if o.sigill() {
            failures.push(format!("ml isa: {}", o.describe()));
        } else {
            report.detected_features = Some(outcome::parse_isa(&o.stdout).1);
        }
    }

    match config.expect {
        Expect::Reject => {
            let model = ctx
                .golds
                .first()
                .map(|g| g.model.clone())
                .unwrap_or_else(|| ctx.root.join("target/matrix/_models/none.mlb"));
            let args = vec![
                "logits".to_string(),
                model.display().to_string(),
                "--tokens".into(),
                "1,7,42,100".into(),
                "-n".into(),
                "16".into(),
            ];
            match run.ml(&args) {
                Ok(o) => match outcome::check_reject(&o, &cell.expected_missing) {
                    Ok(guard) => report.guard = Some(guard),
                    Err(e) => failures.push(format!("ml logits: {e}")),
                },
                Err(e) => failures.push(format!("ml logits: {e:#}")),
            }
        }
        Expect::Pass => {
            if let Some(e) = &ctx.gold_error {
                failures.push(format!("golden unavailable: {e}"));
            }
            for gold in &ctx.golds {
                let e2e = run.golden_e2e(gold);
                if !e2e.ok {
                    failures.push(format!("e2e {}: {}", e2e.golden, e2e.detail));
                }
                report.e2e.push(e2e);
            }
        }
        // Compile-only cells never run; `host` was resolved when the matrix loaded.
        Expect::CompileOnly | Expect::Host | Expect::BelowFloor => unreachable!(),
    }

    // Kernel tests (full mode).
    if built.tests_failed && !ctx.quick {
        failures.push("test binaries did not build".into());
    }
    if let Some(exes) = &built.tests {
        run.kernel_tests(exes, &mut report, &mut failures);
    }

    // Instructions per decoded token, on pass cells under qemu.
    if config.expect == Expect::Pass
        && failures.is_empty()
        && matches!(runner, Runner::Qemu { .. })
        && ctx.kind != BuilderKind::Cross
    {
        match run.count_instructions() {
            Ok(costs) => report.icount = costs,
            Err(e) => failures.push(format!("instruction count: {e:#}")),
        }
    }

    report.seconds = t.elapsed().as_secs_f64();
    if failures.is_empty() {
        report.result = if config.expect == Expect::Reject {
            CellResult::Rejected
        } else {
            CellResult::Pass
        };
    } else {
        report.result = CellResult::Fail;
        report.reason = failures.join("; ");
    }
    progress.done(&row.name, &step, report.seconds, &report.grid());
    report
}

impl CellRun<'_> {
    /// `ml args…` on this cell's CPU.
    fn ml(&self, args: &[String]) -> Result<RunOutput> {
        self.built.exec_ml(self.sh, self.ctx, self.runner, args)
    }

    /// `ml logits` of one golden's model and tokens, compared with the golden.
    fn golden_e2e(&self, gold: &Gold) -> E2e {
        let failed = |detail: String| E2e {
            golden: gold.name.clone(),
            ok: false,
            max_rel_err: None,
            worst_pos: None,
            tokens_match: None,
            detail,
        };
        let tokens = gold
            .logits
            .tokens
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut args = vec![
            "logits".to_string(),
            gold.model.display().to_string(),
            "--tokens".into(),
            tokens,
            "-n".into(),
            gold.logits.steps.len().to_string(),
        ];
        if let Some(batch) = gold.logits.batch {
            args.extend(["--batch".into(), batch.to_string()]);
        }
        let out = match self.ml(&args) {
            Err(e) => return failed(format!("{e:#}")),
            Ok(out) => out,
        };
        if let Err(e) = outcome::check_ran(&out) {
            return failed(format!("ml logits: {e}"));
        }
        let got = match serde_json::from_str::<Logits>(&out.stdout) {
            Err(e) => return failed(format!("ml logits printed no valid JSON: {e}")),
            Ok(got) => got,
        };
        let cmp = golden::compare(&gold.logits, &got, self.ctx.matrix.settings.tolerance);
        E2e {
            golden: gold.name.clone(),
            ok: cmp.ok,
            max_rel_err: Some(cmp.max_rel_err),
            worst_pos: cmp.worst_pos,
            tokens_match: Some(cmp.tokens_match),
            detail: cmp.summary(),
        }
    }

    /// The row's test binaries on this cell: each must pass (a pass cell) or
    /// be refused by the guard (a reject cell). Under `cross`, one
    /// `cross test` for a pass cell, none for a reject cell.
    fn kernel_tests(&self, exes: &[TestExe], report: &mut CellReport, failures: &mut Vec<String>) {
        let CellRun {
            sh,
            ctx,
            plan,
            cell,
            runner,
            built,
        } = self;
        let expect = cell.config.expect;
        if ctx.kind == BuilderKind::Cross {
            if expect != Expect::Pass {
                return;
            }
            let test_run = match built.rb.cross_exec(
                sh,
                runner,
                &["test", "--no-fail-fast"],
                &[],
                &ctx.run_env(runner),
                ctx.timeout(),
            ) {
                Ok(o) => outcome::test_run_pass("cross test (all binaries)", &o),
                Err(e) => TestRun {
                    name: "cross test".into(),
                    ok: false,
                    detail: format!("{e:#}"),
                    counts: Default::default(),
                    seconds: 0.0,
                },
            };
            if !test_run.ok {
                failures.push(format!("kernel tests: {}", test_run.detail));
            }
            report.kernel_tests.push(test_run);
            return;
        }
        for exe in exes {
            let run = || runner.run(sh, &exe.path, &[], &ctx.run_env(runner), ctx.timeout());
            let mut out = run();
            // qemu-user 7.2 can deadlock in a guest's fork (a test spawning
            // `ml`) before the exec: a hang of the emulator, not of the code
            // under test, stopped once its processes use no CPU for a minute
            // (runner.rs). Such a binary runs once more, and the report says so.
            let mut first_timed_out = None;
            if let (Runner::Qemu { .. }, Ok(o)) = (runner, &out) {
                if o.timed_out && expect == Expect::Pass {
                    first_timed_out = Some(o.seconds);
                    ctx.progress.step(
                        &plan.row.name,
                        &format!("{}: hung or timed out under qemu-user, running it again", exe.name),
                    );
                    out = run();
                }
            }
            let mut test_run = match out {
                Err(e) => TestRun {
                    name: exe.name.clone(),
                    ok: false,
                    detail: format!("{e:#}"),
                    counts: Default::default(),
                    seconds: 0.0,
                },
                Ok(o) => match expect {
                    Expect::Pass => outcome::test_run_pass(&exe.name, &o),
                    _ => outcome::test_run_reject(&exe.name, &o, &cell.expected_missing),
                },
            };
            if let Some(secs) = first_timed_out {
                test_run.detail = format!(
                    "{} (on its second run: the first hung or timed out, stopped after {secs:.0}s)",
                    test_run.detail
                );
            }
            if !test_run.ok {
                failures.push(format!("{}: {}", test_run.name, test_run.detail));
            }
            report.kernel_tests.push(test_run);
        }
    }

    /// Instructions per decoded token of the random-weight golden models
    /// (`ml gen` ones: Q8_0 and Q4_0) on one qemu cell, by the difference of a
    /// short and a long greedy run on one thread; the first model's short run
    /// is repeated, and must count exactly the same.
    fn count_instructions(&self) -> Result<Vec<icount::TokenCost>> {
        let CellRun {
            ctx,
            plan,
            runner,
            built,
            ..
        } = self;
        let ml = &built.ml;
        let plugin = ctx
            .icount_plugin
            .as_ref()
            .map_err(|e| anyhow::anyhow!("no plugin: {e}"))?;
        let dir = builder::target_dir(ctx.root, &plan.row.name).join("icount");
        std::fs::create_dir_all(&dir)?;
        let safe_label: String = self
            .cell
            .config
            .label(plan.arch)
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let mut costs = Vec::new();
        // The random-weight models, once each: the batched golden reuses
        // the Q8_0 one.
        let models = ctx
            .golds
            .iter()
            .filter(|g| g.logits.model.is_none() && g.logits.batch.is_none());
        for (i, g) in models.enumerate() {
            let out = |n: u32, k: &str| dir.join(format!("{safe_label}-{}-{n}{k}.txt", g.name));
            let seconds = std::cell::Cell::new(0.0);
            let count_args = |args: &[String], file: &std::path::Path| {
                icount::run_counted(runner, plugin, ml, args, file, ctx.timeout()).map(|(c, run)| {
                    seconds.set(seconds.get() + run.seconds);
                    c
                })
            };
            let count = |n: u32, k: &str| count_args(&icount::run_args(&g.model, n), &out(n, k));
            let short = count(icount::SHORT_RUN, "")?;
            let long = count(icount::LONG_RUN, "")?;
            let mut cost = icount::token_cost(&g.name, &short, &long);
            if i == 0 {
                // The count must be exact: a second identical run executes
                // the same instructions, or the figure means nothing.
                let again = count(icount::SHORT_RUN, "-again")?.total;
                if again != short.total {
                    anyhow::bail!(
                        "not exact: two identical runs of {} counted {} and {again} instructions",
                        g.name,
                        short.total
                    );
                }
                cost.repeated_exactly = Some(true);
            }
            let prompt = |n: u32| count_args(&icount::prompt_args(&g.model, n), &out(n, "-prompt"));
            let (short_prompt, long_prompt) = (prompt(icount::SHORT_PROMPT)?, prompt(icount::LONG_PROMPT)?);
            cost.per_prompt_token = Some(icount::prompt_token_cost(&short_prompt, &long_prompt));
            cost.seconds = seconds.get();
            costs.push(cost);
        }
        Ok(costs)
    }

    /// A `below-floor` cell: `ml logits` and every test binary must die of
    /// SIGILL before any instruction of their own ran, as qemu's trace shows
    /// (`floor::check`). The trace needs this machine's qemu (and the target's
    /// sysroot): with `cross`, whose test executables are paths inside its
    /// container, only `ml` (built into the mounted target dir) is checked.
    fn below_floor(&self, report: &mut CellReport) {
        let CellRun {
            sh,
            ctx,
            plan,
            runner,
            built,
            ..
        } = self;
        let fail = |report: &mut CellReport, why: String| {
            report.result = CellResult::Fail;
            report.reason = why;
        };
        let prefix = runner.prefix();
        let Some((qemu, qemu_args)) = prefix.split_first() else {
            return fail(report, "below-floor cells run under qemu only".into());
        };
        let logs = builder::target_dir(ctx.root, &plan.row.name).join("floor-traces");
        if let Err(e) = std::fs::create_dir_all(&logs) {
            return fail(report, format!("create {}: {e}", logs.display()));
        }
        let model = ctx
            .golds
            .first()
            .map(|g| g.model.display().to_string())
            .unwrap_or_default();
        let logits = ["logits", &model, "--tokens", "1,7,42,100", "-n", "16"].map(String::from);
        /// One process that must die at the floor.
        struct Probe {
            name: String,
            exe: PathBuf,
            args: Vec<String>,
        }
        let mut probes = vec![Probe {
            name: "ml logits".into(),
            exe: built.ml.clone(),
            args: logits.to_vec(),
        }];
        if ctx.kind != BuilderKind::Cross {
            for exe in built.tests.as_deref().unwrap_or_default() {
                probes.push(Probe {
                    name: exe.name.clone(),
                    exe: exe.path.clone(),
                    args: vec![],
                });
            }
        }
        let safe = |s: &str| s.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
        let mut failures = Vec::new();
        for (i, probe) in probes.iter().enumerate() {
            let log = logs.join(format!("{}-{i}.log", safe(&report.cpu)));
            let mut argv: Vec<String> = qemu_args.to_vec();
            argv.extend(floor::qemu_trace_args(&log.display().to_string()));
            argv.push(probe.exe.display().to_string());
            argv.extend(probe.args.iter().cloned());
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
                report.reason = format!("{}: {detail}", probe.name);
            }
            if !ok {
                failures.push(format!("{}: {detail}", probe.name));
            }
            if i > 0 {
                report.kernel_tests.push(TestRun {
                    name: probe.name.clone(),
                    ok,
                    detail,
                    counts: Default::default(),
                    seconds,
                });
            }
        }
        let _ = std::fs::remove_dir(&logs);
        if failures.is_empty() {
            report.result = CellResult::BelowFloor;
        } else {
            fail(report, failures.join("; "));
        }
    }
}
